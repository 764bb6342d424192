//! `Flight`: a staging buffer's trip through the GPU, from the submission that uses it to the
//! `map_async` callback that says the GPU is done with it.
//!
//! This is the mechanism of reuse. After a copy from or into a staging buffer is submitted,
//! the buffer is mapped again with `map_async`; wgpu runs the callback only once every
//! submission that used the buffer has completed. Until then the buffer is held by the
//! flight or by its owner and is in no cache, so nothing else can write or read it. Polling
//! the device (`device.poll`) only drives wgpu to run callbacks; it never decides reuse.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use super::error::StagingError;
use super::host_buffer::HostBuffer;
use super::staging_shared::StagingShared;

/// What happens to a buffer handed to a flight when its map completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterMap {
    /// Into the cache as it is (upload buffers: mapped for writing).
    Cache,
    /// Unmap, then into the cache (download buffers).
    UnmapThenCache,
}

struct State {
    /// `None` while the map is pending.
    outcome: Option<Result<(), String>>,
    /// A buffer nobody holds any more, to be disposed of when the map completes.
    orphan: Option<(HostBuffer, AfterMap)>,
}

/// One pending `map_async` of a staging buffer after the submission that used it.
pub(crate) struct Flight {
    device: wgpu::Device,
    /// The device's loss record: a flight on a lost device does not complete as done.
    error_log: Option<crate::gpu::ErrorLog>,
    /// The submission that uses the buffer; `None` when nothing was submitted (an error path
    /// that only restores a mapping).
    submission: Option<wgpu::SubmissionIndex>,
    state: Mutex<State>,
    done: Condvar,
}

impl Flight {
    /// Maps `buffer` for `mode` over `range` once the GPU is done with it. `orphan`, if
    /// given, is the buffer's [`HostBuffer`], which the flight then disposes of by itself.
    ///
    /// Must be called after the submission that uses the buffer, with no lock of the pool
    /// held: the callback can run inside this call.
    pub fn start(
        shared: &Arc<StagingShared>,
        buffer: &wgpu::Buffer,
        mode: wgpu::MapMode,
        range: std::ops::Range<u64>,
        submission: Option<wgpu::SubmissionIndex>,
        orphan: Option<(HostBuffer, AfterMap)>,
    ) -> Arc<Flight> {
        let flight = Arc::new(Flight {
            device: shared.device.clone(),
            error_log: shared.error_log.clone(),
            submission,
            state: Mutex::new(State {
                outcome: None,
                orphan,
            }),
            done: Condvar::new(),
        });
        let callback_flight = flight.clone();
        let pool = Arc::downgrade(shared);
        // An invalid map call reports through the callback too (wgpu always calls it), so
        // the scope's verdict adds nothing; it keeps the error off the uncaptured handler.
        let _ = crate::gpu::scope::catch(&shared.device, || {
            buffer.map_async(mode, range, move |result| {
                callback_flight.complete(result.map_err(|e| e.to_string()), &pool);
            });
        });
        flight
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The map callback. Runs on whichever thread polls wgpu.
    fn complete(&self, outcome: Result<(), String>, pool: &Weak<StagingShared>) {
        let orphan = {
            let mut state = self.lock();
            state.outcome = Some(outcome.clone());
            state.orphan.take()
        };
        self.done.notify_all();
        if let Some((buffer, after)) = orphan {
            dispose(buffer, after, outcome.is_ok(), pool);
        }
    }

    /// Whether the map has completed (successfully or not), without waiting or polling.
    pub fn is_done(&self) -> bool {
        self.lock().outcome.is_some()
    }

    /// Drives wgpu once without blocking, then says whether the map has completed.
    pub fn poll_done(&self) -> bool {
        if !self.is_done() {
            let _ = self.device.poll(wgpu::PollType::Poll);
        }
        self.is_done()
    }

    /// Blocks until the map has completed; its result, or [`StagingError::DeviceLost`] when
    /// the staging pool knows the device's loss record and the device was lost.
    pub fn wait(&self) -> Result<(), StagingError> {
        loop {
            if let Some(outcome) = self.lock().outcome.clone() {
                // On a lost device a map may complete without the copy before it having run.
                if let Some(log) = &self.error_log {
                    log.check_device()?;
                }
                return outcome.map_err(StagingError::Map);
            }
            let poll = match &self.submission {
                Some(index) => wgpu::PollType::Wait {
                    submission_index: Some(index.clone()),
                    timeout: None,
                },
                None => wgpu::PollType::wait_indefinitely(),
            };
            self.device.poll(poll)?;
            // The submission is done, so wgpu has run the callback or is running it on
            // another thread that polled at the same time: wait for that briefly.
            let state = self.lock();
            if state.outcome.is_none() {
                let _ = self
                    .done
                    .wait_timeout(state, std::time::Duration::from_millis(1))
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    /// Hands the flight the buffer it maps, when its holder gives up on it before or after
    /// the map completed: the buffer goes back to the cache once the GPU is done with it.
    pub fn abandon(&self, buffer: HostBuffer, after: AfterMap, pool: &Weak<StagingShared>) {
        let mut state = self.lock();
        match state.outcome.clone() {
            None => state.orphan = Some((buffer, after)),
            Some(outcome) => {
                drop(state);
                dispose(buffer, after, outcome.is_ok(), pool);
            }
        }
    }
}

/// Returns a buffer whose map completed to the cache, or destroys it if the map failed or
/// the pool is gone.
fn dispose(buffer: HostBuffer, after: AfterMap, mapped: bool, pool: &Weak<StagingShared>) {
    if !mapped {
        return;
    }
    let Some(shared) = pool.upgrade() else {
        return;
    };
    if after == AfterMap::UnmapThenCache {
        buffer.buffer().unmap();
    }
    shared.cache.put(buffer);
}
