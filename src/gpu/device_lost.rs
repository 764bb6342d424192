//! The error of an operation on a device that wgpu has lost.

use thiserror::Error;

/// The device was lost: wgpu reported it through its device-lost callback, which
/// [`ErrorLog`](super::ErrorLog) records.
///
/// Once a device is lost, wgpu 30 drops every later submission and swallows the errors it
/// would have raised (WebGPU's rule), so without this check a write "succeeds" while nothing
/// reaches the device. Pools and staging pools that know the device's
/// [`ErrorLog`](super::ErrorLog) return this error from every operation that moves data or
/// memory once the loss is recorded.
/// Nothing recovers a lost device: open a new one and new pools on it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "the device was lost ({reason}): wgpu runs no work on it any more and its memory's \
     contents are gone; open a new device and new pools on it"
)]
pub struct DeviceLost {
    reason: String,
}

impl DeviceLost {
    /// A loss for `reason`, as wgpu reported it.
    pub fn new(reason: impl Into<String>) -> DeviceLost {
        DeviceLost {
            reason: reason.into(),
        }
    }

    /// wgpu's reason and message, for example `Unknown: Out of memory` or `Destroyed`.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}
