//! The one recording wrapper: a segment source that tells an observer what it did. A replay
//! wraps its simulated device in it, and a pool's memory wraps its segment buffers or
//! address ranges in it while the pool records its history.

use std::ops::Range;

use super::EventObserver;
use crate::engine::{PageMapping, SegmentId, SegmentKind, SegmentSource, SourceError};

/// A segment source that forwards every call to `source` and tells `observer` what
/// succeeded: creations, reservations, maps and unmaps after the source did them (a call
/// that failed is not reported), releases just before the source is asked (a release cannot
/// fail). Calls that change nothing the observer records (`page_mapping`, `release_spare`,
/// `segment_address`) are forwarded only. An observer whose `ACTIVE` is false costs nothing.
pub(crate) struct Observed<'a, S: ?Sized, O> {
    /// The memory that does the work.
    pub source: &'a mut S,
    /// Told of what the memory did.
    pub observer: &'a mut O,
}

impl<S: SegmentSource + ?Sized, O: EventObserver> SegmentSource for Observed<'_, S, O> {
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

    fn release_spare(&mut self, bytes: u64) {
        self.source.release_spare(bytes);
    }

    fn segment_address(&mut self, id: SegmentId, size: u64, kind: SegmentKind) -> Option<u64> {
        self.source.segment_address(id, size, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::VirtualSegments;
    use crate::history::{Action, EventLog};

    #[test]
    fn the_observer_hears_of_what_the_source_did_and_not_of_what_it_refused() {
        let mut device = VirtualSegments::with_device_limit(4 << 20);
        let mut log = Some(EventLog::with_capacity(16));
        let mut observed = Observed {
            source: &mut device,
            observer: &mut log,
        };
        let small = SegmentKind::Small;
        observed
            .create_segment(SegmentId(0), 2 << 20, small)
            .expect("within the limit");
        observed
            .create_segment(SegmentId(1), 8 << 20, small)
            .expect_err("over the limit");
        observed.release_segment(SegmentId(0), 2 << 20);
        let log = log.expect("still recording");
        let actions: Vec<Action> = log.history().events().map(|e| e.action).collect();
        assert_eq!(actions, [Action::SegmentAlloc, Action::SegmentFree]);
        assert_eq!(device.physical_bytes(), 0);
    }

    #[test]
    fn an_absent_log_hears_nothing_and_the_source_still_works() {
        let mut device = VirtualSegments::unlimited();
        let mut log: Option<EventLog> = None;
        let mut observed = Observed {
            source: &mut device,
            observer: &mut log,
        };
        observed
            .create_segment(SegmentId(0), 2 << 20, SegmentKind::Small)
            .expect("no limit");
        assert_eq!(device.physical_bytes(), 2 << 20);
        assert!(log.is_none());
    }
}
