//! Watching a replay: what happened at each operation, for histories, snapshots and plots.
//!
//! [`replay_observed`](super::replay_observed) calls an observer on every allocation, free,
//! out-of-memory and segment creation or release of its first run. The timed runs use the
//! no-op observer `()`, which compiles to nothing.

use std::ops::Range;

use crate::engine::{
    Allocation, Engine, PageMapping, SegmentId, SegmentKind, SegmentSource, SourceError,
};

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
    /// The engine reserved address range `id` of `size` bytes (page-mapped pools).
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
impl ReplayObserver for () {
    const ACTIVE: bool = false;
}

/// A segment source that forwards every call to `source` and tells `observer` what
/// succeeded.
pub(crate) struct Observed<'a, S, O> {
    pub source: S,
    pub observer: &'a mut O,
}

impl<S: SegmentSource, O: ReplayObserver> SegmentSource for Observed<'_, S, O> {
    fn create_segment(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError> {
        self.source.create_segment(id, size, kind)?;
        if O::ACTIVE {
            self.observer.on_segment_create(id, size, kind);
        }
        Ok(())
    }

    fn release_segment(&mut self, id: SegmentId, size: u64) {
        if O::ACTIVE {
            self.observer.on_segment_release(id, size);
        }
        self.source.release_segment(id, size);
    }

    fn page_mapping(&self) -> Option<PageMapping> {
        self.source.page_mapping()
    }

    fn reserve_range(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError> {
        self.source.reserve_range(id, size, kind)?;
        if O::ACTIVE {
            self.observer.on_range_reserve(id, size, kind);
        }
        Ok(())
    }

    fn release_range(&mut self, id: SegmentId, size: u64) {
        if O::ACTIVE {
            self.observer.on_range_release(id, size);
        }
        self.source.release_range(id, size);
    }

    fn map_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.source.map_pages(id, runs)?;
        if O::ACTIVE {
            self.observer.on_map(id, runs);
        }
        Ok(())
    }

    fn unmap_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.source.unmap_pages(id, runs)?;
        if O::ACTIVE {
            self.observer.on_unmap(id, runs);
        }
        Ok(())
    }

    fn release_held(&mut self, bytes: u64) {
        self.source.release_held(bytes);
    }

    fn segment_address(&mut self, id: SegmentId, size: u64, kind: SegmentKind) -> Option<u64> {
        self.source.segment_address(id, size, kind)
    }
}
