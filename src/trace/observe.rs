//! Watching a replay: what happened at each operation, for histories, snapshots and plots.
//!
//! [`replay_observed`](super::replay_observed) calls an observer on every allocation, free,
//! out-of-memory and segment creation or release of its first run. The timed runs use the
//! no-op observer `()`, which compiles to nothing.

use crate::engine::{Allocation, Engine, SegmentId, SegmentKind};

/// Called by a replay as it runs. Every method has an empty default.
pub trait ReplayObserver {
    /// Whether the replay should call this observer at all (false only for `()`).
    const ACTIVE: bool = true;

    /// Operation `op` (its index in the trace) is about to ask for `size` bytes on `stream`.
    fn before_alloc(&mut self, _op: usize, _size: u64, _stream: u32) {}
    /// Operation `op` (its index in the trace) allocated `allocation` on `stream`.
    fn on_alloc(&mut self, _op: usize, _allocation: &Allocation, _stream: u32) {}
    /// Operation `op` is about to free `allocation` (still live in the engine).
    fn on_free(&mut self, _op: usize, _allocation: &Allocation, _stream: u32) {}
    /// Operation `op` asked for `size` bytes on `stream` and got out-of-memory.
    fn on_oom(&mut self, _op: usize, _size: u64, _stream: u32) {}
    /// The engine created segment `id` of `size` bytes.
    fn on_segment_create(&mut self, _id: SegmentId, _size: u64, _pool: SegmentKind) {}
    /// The engine released segment `id` of `size` bytes.
    fn on_segment_release(&mut self, _id: SegmentId, _size: u64) {}
    /// Operation `op` is done; `live` is the summed requested size of live allocations.
    fn after_op(&mut self, _op: usize, _engine: &Engine, _live: u64) {}
    /// The replay is over; `engine` holds the final state.
    fn finish(&mut self, _engine: &Engine) {}
}

/// The observer that watches nothing.
impl ReplayObserver for () {
    const ACTIVE: bool = false;
}
