//! The event log behind a recorder: a bounded [`History`] plus the addresses it gives
//! segments, so that blocks and pages get addresses as PyTorch's snapshots have them.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::{Action, Event, EventObserver, History, SegmentPlacement, TorchSnapshot, now_us};
use crate::engine::{Allocation, SegmentId, SegmentKind, SegmentSnapshot};

/// Where the log places the first segment: an address that looks like a CUDA device
/// pointer. Segments follow one another, each 2 MiB aligned.
const FIRST_ADDRESS: u64 = 0x7f00_0000_0000;
const SEGMENT_ALIGN: u64 = 2 << 20;

/// A bounded history of allocator events with the addresses of live segments.
#[derive(Debug, Clone)]
pub struct EventLog {
    history: History,
    addresses: HashMap<SegmentId, (u64, u32)>,
    next_address: u64,
    /// The label page events of one action get while it is set (see
    /// [`EventLog::set_page_label`]).
    page_label: Option<(Action, Arc<str>)>,
}

impl EventLog {
    /// A log keeping at most `capacity` events.
    pub fn with_capacity(capacity: usize) -> EventLog {
        EventLog {
            history: History::with_capacity(capacity),
            addresses: HashMap::new(),
            next_address: FIRST_ADDRESS,
            page_label: None,
        }
    }

    /// The events.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The address and stream of a live segment.
    pub fn segment(&self, id: SegmentId) -> Option<(u64, u32)> {
        self.addresses.get(&id).copied()
    }

    /// The address of an allocated block.
    pub fn address_of(&self, allocation: &Allocation) -> u64 {
        self.addresses
            .get(&allocation.segment)
            .map_or(0, |(base, _)| base + allocation.offset)
    }

    /// Gives segment (or address range) `id` of `size` bytes an address, with no event.
    pub fn place(&mut self, id: SegmentId, size: u64, stream: u32) -> u64 {
        let addr = self.next_address;
        self.next_address += size.div_ceil(SEGMENT_ALIGN) * SEGMENT_ALIGN;
        self.addresses.insert(id, (addr, stream));
        addr
    }

    /// Forgets the address of segment (or range) `id`, with no event.
    pub fn unplace(&mut self, id: SegmentId) -> Option<(u64, u32)> {
        self.addresses.remove(&id)
    }

    /// Records a new segment.
    pub fn segment_created(&mut self, id: SegmentId, size: u64, stream: u32, time: u64) {
        let addr = self.place(id, size, stream);
        self.history
            .record(Event::new(Action::SegmentAlloc, addr, size, stream, time));
    }

    /// Records a released segment.
    pub fn segment_released(&mut self, id: SegmentId, size: u64, time: u64) {
        let (addr, stream) = self.unplace(id).unwrap_or((0, 0));
        self.history
            .record(Event::new(Action::SegmentFree, addr, size, stream, time));
    }

    /// Labels the page events of one action recorded from now on (`None`: no label), for
    /// example the `SegmentUnmap` events of a block evicted to host memory with
    /// [`EVICTED`](super::EVICTED). Events of other actions stay unlabelled: pages the same
    /// call recycles are not the block's.
    pub fn set_page_label(&mut self, label: Option<(Action, Arc<str>)>) {
        self.page_label = label;
    }

    /// Records pages mapped (`SegmentMap`) or unmapped (`SegmentUnmap`) in range `id`.
    pub fn pages(&mut self, action: Action, id: SegmentId, runs: &[Range<u64>], time: u64) {
        let (base, stream) = self.segment(id).unwrap_or((0, 0));
        for run in runs {
            let mut event = Event::new(action, base + run.start, run.end - run.start, stream, time);
            event.label = match &self.page_label {
                Some((labelled, label)) if *labelled == action => Some(label.clone()),
                _ => None,
            };
            self.history.record(event);
        }
    }

    /// Records an allocation (`Alloc`) or its free (`FreeCompleted`), with the size asked
    /// for, as PyTorch does.
    pub fn block(&mut self, action: Action, allocation: &Allocation, stream: u32, time: u64) {
        let addr = self.address_of(allocation);
        self.history
            .record(Event::new(action, addr, allocation.requested, stream, time));
    }

    /// Records a request that failed with out-of-memory.
    pub fn oom(&mut self, size: u64, stream: u32, time: u64) {
        self.history
            .record(Event::new(Action::Oom, 0, size, stream, time));
    }

    /// The log with `segments` (the engine's layout now) as a PyTorch snapshot.
    pub fn torch_snapshot(
        &self,
        segments: &[SegmentSnapshot],
        conf: &str,
        time_unit: &'static str,
    ) -> TorchSnapshot {
        TorchSnapshot::new(segments, self, &self.history, conf, time_unit)
    }
}

impl SegmentPlacement for EventLog {
    fn address(&self, segment: &SegmentSnapshot) -> u64 {
        self.segment(segment.id).map_or(0, |(addr, _)| addr)
    }

    fn stream(&self, segment: &SegmentSnapshot) -> u32 {
        self.segment(segment.id).map_or(segment.stream, |(_, s)| s)
    }
}

/// A log as the observer of a pool's memory: segments, ranges and pages are recorded at the
/// wall-clock time ([`now_us`](super::now_us)) on stream 0 (the pool serves one stream).
/// Allocations and frees are not recorded here: the pool records them itself, with their
/// blocks' streams.
impl EventObserver for EventLog {
    fn on_segment_create(&mut self, id: SegmentId, size: u64, _kind: SegmentKind) {
        self.segment_created(id, size, 0, now_us());
    }

    fn on_segment_release(&mut self, id: SegmentId, size: u64) {
        self.segment_released(id, size, now_us());
    }

    fn on_range_reserve(&mut self, id: SegmentId, size: u64, _kind: SegmentKind) {
        self.place(id, size, 0);
    }

    fn on_range_release(&mut self, id: SegmentId, _size: u64) {
        self.unplace(id);
    }

    fn on_map(&mut self, id: SegmentId, runs: &[Range<u64>]) {
        self.pages(Action::SegmentMap, id, runs, now_us());
    }

    fn on_unmap(&mut self, id: SegmentId, runs: &[Range<u64>]) {
        self.pages(Action::SegmentUnmap, id, runs, now_us());
    }
}
