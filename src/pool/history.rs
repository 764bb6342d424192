//! Recording a pool's history and writing it as a PyTorch memory snapshot.

use std::sync::atomic::Ordering;

use super::Pool;
use crate::history::{EventLog, History, TorchSnapshot};

impl Pool {
    /// Starts recording the pool's events (alloc, free, segment creation and release, OOM),
    /// keeping the latest `capacity`, with `time_us` in microseconds since the Unix epoch;
    /// `None` stops recording and drops the history. Starting again clears it.
    ///
    /// While recording, every allocation and free takes the pool's lock (the lock-free reuse
    /// cache is bypassed, so that each one is an event). Blocks moved to and from host memory
    /// are not recorded, and segment addresses are the recorder's own (wgpu has no device
    /// addresses), consistent within the history.
    pub fn record_history(&self, capacity: Option<usize>) {
        let mut state = self.shared.lock_flushed();
        match capacity {
            Some(capacity) => {
                let mut log = EventLog::with_capacity(capacity);
                // Segments that exist already get addresses, without events.
                for segment in state.engine.snapshot() {
                    log.place(segment.id, segment.size, segment.stream);
                }
                state.memory.history = Some(log);
                self.shared.recording.store(true, Ordering::Release);
            }
            None => {
                self.shared.recording.store(false, Ordering::Release);
                state.memory.history = None;
            }
        }
    }

    /// The recorded events, if the pool records.
    pub fn history(&self) -> Option<History> {
        let state = self.shared.lock_flushed();
        state
            .memory
            .history
            .as_ref()
            .map(|log| log.history().clone())
    }

    /// The pool's segments now and its recorded events in the layout of PyTorch's
    /// `torch.cuda.memory._dump_snapshot`, for `torch.cuda._memory_viz`; `None` unless the
    /// pool records ([`record_history`](Pool::record_history)). Write it with
    /// [`write_torch_snapshot`](crate::history::write_torch_snapshot).
    pub fn torch_snapshot(&self) -> Option<TorchSnapshot> {
        let state = self.shared.lock_flushed();
        let log = state.memory.history.as_ref()?;
        let conf = state.engine.config().to_conf_string();
        Some(log.torch_snapshot(&state.engine.snapshot(), &conf, "us"))
    }
}
