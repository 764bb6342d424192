//! A shared record of the wgpu errors no error scope caught.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::device_lost::DeviceLost;

/// Errors that reached the device's uncaptured-error handler, and a device-lost report.
///
/// Installed by [`GpuContext::headless`](super::GpuContext::headless) in place of wgpu's
/// default handler, which panics. Each error is appended here and printed to stderr with the
/// prefix `wgpool: uncaptured wgpu error:`; nothing panics. Clones share the same record.
///
/// Pools given the log (`PoolOptions::with_error_log`; `Pool::from_context` does it) check
/// [`is_device_lost`](Self::is_device_lost) and fail with [`DeviceLost`] once the device is
/// lost. An application that opens its own device and keeps its own device-lost callback
/// calls [`record_device_lost`](Self::record_device_lost) from it.
#[derive(Clone, Debug, Default)]
pub struct ErrorLog {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<ErrorLogState>,
    /// Set once the device is lost, after the report is stored; read without the lock.
    lost: AtomicBool,
}

#[derive(Debug, Default)]
struct ErrorLogState {
    errors: Vec<String>,
    device_lost: Option<String>,
}

impl ErrorLog {
    /// Records one uncaptured error and prints it to stderr.
    pub fn record_error(&self, error: &wgpu::Error) {
        let text = error_text(error);
        eprintln!("wgpool: uncaptured wgpu error: {text}");
        self.lock().errors.push(text);
    }

    /// Records that the device was lost, and why. From then on
    /// [`is_device_lost`](Self::is_device_lost) is true for every clone of the log.
    pub fn record_device_lost(&self, reason: wgpu::DeviceLostReason, message: &str) {
        let text = if message.is_empty() {
            format!("{reason:?}")
        } else {
            format!("{reason:?}: {message}")
        };
        // Dropping the device reports `Destroyed`; that is not worth a line on stderr.
        if reason != wgpu::DeviceLostReason::Destroyed {
            eprintln!("wgpool: device lost: {text}");
        }
        self.lock().device_lost = Some(text);
        self.inner.lost.store(true, Ordering::Release);
    }

    /// Whether the device was lost: one atomic load, cheap enough for every allocation.
    #[inline]
    pub fn is_device_lost(&self) -> bool {
        self.inner.lost.load(Ordering::Acquire)
    }

    /// `Err` with the report once the device was lost.
    #[inline]
    pub fn check_device(&self) -> Result<(), DeviceLost> {
        if self.is_device_lost() {
            return Err(self.lost_error());
        }
        Ok(())
    }

    #[cold]
    fn lost_error(&self) -> DeviceLost {
        DeviceLost::new(self.device_lost().unwrap_or_default())
    }

    /// Removes and returns the uncaptured errors recorded so far, oldest first.
    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().errors)
    }

    /// The device-lost report, if the device was lost.
    pub fn device_lost(&self) -> Option<String> {
        self.lock().device_lost.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ErrorLogState> {
        // A poisoned lock only means another thread panicked while pushing a string; the
        // record itself is still consistent.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The full text of a wgpu error, including its chain of sources.
pub fn error_text(error: &wgpu::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}
