//! Watching an allocator: what happened at each operation, for histories, snapshots and
//! plots.
//!
//! A replay (`trace::replay_observed`) calls an observer on every allocation, free,
//! out-of-memory and segment creation or release of its first run; its timed runs use the
//! no-op observer `()`, which compiles to nothing. A pool's memory tells its
//! [`EventLog`](super::EventLog) (while it records its history) of the segments, ranges and
//! pages it creates and releases, through the same recording wrapper (`Observed`, internal
//! to the crate) the replay uses.

use std::ops::Range;

use crate::engine::{Allocation, Engine, SegmentId, SegmentKind};

/// Told of allocator events as they happen. Every method has an empty default.
///
/// The segment, range and page methods are called by the recording wrapper after
/// the wrapped source succeeded (creations, reservations, maps and unmaps) or before the
/// source is asked (releases), so an observer never hears of memory that was not there.
/// The other methods are called by whoever drives the engine: a replay calls all of them.
pub trait EventObserver {
    /// Whether the caller should call this observer at all (false only for `()`).
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
    fn on_segment_create(&mut self, _id: SegmentId, _size: u64, _kind: SegmentKind) {}
    /// The engine released segment `id` of `size` bytes.
    fn on_segment_release(&mut self, _id: SegmentId, _size: u64) {}
    /// The engine reserved address range `id` of `size` bytes (pools in pages mode).
    fn on_range_reserve(&mut self, _id: SegmentId, _size: u64, _kind: SegmentKind) {}
    /// The engine released address range `id`.
    fn on_range_release(&mut self, _id: SegmentId, _size: u64) {}
    /// The engine mapped `runs` (offsets in range `id`) in one bind.
    fn on_map(&mut self, _id: SegmentId, _runs: &[Range<u64>]) {}
    /// The engine unmapped `runs` of range `id` in one bind.
    fn on_unmap(&mut self, _id: SegmentId, _runs: &[Range<u64>]) {}
    /// Operation `op` is done; `live` is the summed requested size of live allocations.
    fn after_op(&mut self, _op: usize, _engine: &Engine, _live: u64) {}
    /// The replay is over; `engine` holds the final state.
    fn finish(&mut self, _engine: &Engine) {}
}

/// The observer that watches nothing.
impl EventObserver for () {
    const ACTIVE: bool = false;
}

/// An observer that may be absent: `Some` is told of every event, `None` of none.
impl<O: EventObserver> EventObserver for Option<O> {
    const ACTIVE: bool = O::ACTIVE;

    fn before_alloc(&mut self, op: usize, size: u64, stream: u32) {
        if let Some(observer) = self {
            observer.before_alloc(op, size, stream);
        }
    }

    fn on_alloc(&mut self, op: usize, allocation: &Allocation, stream: u32) {
        if let Some(observer) = self {
            observer.on_alloc(op, allocation, stream);
        }
    }

    fn on_free(&mut self, op: usize, allocation: &Allocation, stream: u32) {
        if let Some(observer) = self {
            observer.on_free(op, allocation, stream);
        }
    }

    fn on_oom(&mut self, op: usize, size: u64, stream: u32) {
        if let Some(observer) = self {
            observer.on_oom(op, size, stream);
        }
    }

    fn on_segment_create(&mut self, id: SegmentId, size: u64, kind: SegmentKind) {
        if let Some(observer) = self {
            observer.on_segment_create(id, size, kind);
        }
    }

    fn on_segment_release(&mut self, id: SegmentId, size: u64) {
        if let Some(observer) = self {
            observer.on_segment_release(id, size);
        }
    }

    fn on_range_reserve(&mut self, id: SegmentId, size: u64, kind: SegmentKind) {
        if let Some(observer) = self {
            observer.on_range_reserve(id, size, kind);
        }
    }

    fn on_range_release(&mut self, id: SegmentId, size: u64) {
        if let Some(observer) = self {
            observer.on_range_release(id, size);
        }
    }

    fn on_map(&mut self, id: SegmentId, runs: &[Range<u64>]) {
        if let Some(observer) = self {
            observer.on_map(id, runs);
        }
    }

    fn on_unmap(&mut self, id: SegmentId, runs: &[Range<u64>]) {
        if let Some(observer) = self {
            observer.on_unmap(id, runs);
        }
    }

    fn after_op(&mut self, op: usize, engine: &Engine, live: u64) {
        if let Some(observer) = self {
            observer.after_op(op, engine, live);
        }
    }

    fn finish(&mut self, engine: &Engine) {
        if let Some(observer) = self {
            observer.finish(engine);
        }
    }
}
