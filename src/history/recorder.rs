//! Recording a replay: its events with addresses, its final layout, and memory over time.

use std::collections::HashMap;

use super::{Action, Event, History};
use crate::engine::{Allocation, Engine, SegmentId, SegmentKind, SegmentSnapshot};
use crate::trace::ReplayObserver;

/// Where the recorder places the first segment: an address that looks like a CUDA device
/// pointer. Segments follow one another, each 2 MiB aligned.
const FIRST_ADDRESS: u64 = 0x7f00_0000_0000;
const SEGMENT_ALIGN: u64 = 2 << 20;

/// The most points a memory curve keeps; longer replays keep each bucket's highest values.
pub const MAX_SAMPLES: usize = 2000;

/// Memory at one point of a replay (for a bucket of operations: the highest value of each
/// series in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemorySample {
    /// Index of the bucket's first operation.
    pub op: u64,
    /// Summed requested sizes of live allocations.
    pub live: u64,
    /// Summed block sizes of live allocations.
    pub allocated: u64,
    /// Bytes of segments.
    pub reserved: u64,
    /// Segments created in the bucket.
    pub segments_created: u32,
    /// Segments released in the bucket.
    pub segments_released: u32,
}

/// A [`ReplayObserver`] that records a [`History`] with addresses, the final layout, and
/// [`MemorySample`]s.
#[derive(Debug)]
pub struct ReplayRecorder {
    history: History,
    addresses: HashMap<SegmentId, u64>,
    streams: HashMap<SegmentId, u32>,
    next_address: u64,
    stream: u32,
    /// The operation running now.
    op: u64,
    ops: u64,
    bucket: u64,
    samples: Vec<MemorySample>,
    final_segments: Vec<SegmentSnapshot>,
    peak: (u64, u64),
}

impl ReplayRecorder {
    /// A recorder keeping at most `capacity` events, for a trace of `ops` operations.
    pub fn new(capacity: usize, ops: usize) -> ReplayRecorder {
        ReplayRecorder {
            history: History::with_capacity(capacity),
            addresses: HashMap::new(),
            streams: HashMap::new(),
            next_address: FIRST_ADDRESS,
            stream: 0,
            op: 0,
            ops: ops as u64,
            bucket: (ops as u64).div_ceil(MAX_SAMPLES as u64).max(1),
            samples: Vec::new(),
            final_segments: Vec::new(),
            peak: (0, 0),
        }
    }

    /// The events.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The segments and blocks at the end of the replay.
    pub fn final_segments(&self) -> &[SegmentSnapshot] {
        &self.final_segments
    }

    /// The address the recorder gave a live segment.
    pub fn segment_address(&self, id: SegmentId) -> Option<u64> {
        self.addresses.get(&id).copied()
    }

    /// The stream a live segment serves.
    pub fn segment_stream(&self, id: SegmentId) -> u32 {
        self.streams.get(&id).copied().unwrap_or(0)
    }

    /// Memory over the replay, one sample per bucket of operations.
    pub fn samples(&self) -> &[MemorySample] {
        &self.samples
    }

    /// The highest reserved bytes and the operation where they were first reached.
    pub fn peak_reserved(&self) -> (u64, u64) {
        self.peak
    }

    /// Operations in the trace.
    pub fn ops(&self) -> u64 {
        self.ops
    }

    fn address_of(&self, allocation: &Allocation) -> u64 {
        self.addresses
            .get(&allocation.segment)
            .map_or(0, |base| base + allocation.offset)
    }

    fn record_runs(&mut self, action: Action, id: SegmentId, runs: &[std::ops::Range<u64>]) {
        let base = self.addresses.get(&id).copied().unwrap_or(0);
        let stream = self.streams.get(&id).copied().unwrap_or(0);
        for run in runs {
            self.history.record(Event::new(
                action,
                base + run.start,
                run.end - run.start,
                stream,
                self.op,
            ));
        }
    }

    fn sample_mut(&mut self, op: u64) -> &mut MemorySample {
        let start = op / self.bucket * self.bucket;
        if self.samples.last().is_none_or(|s| s.op != start) {
            self.samples.push(MemorySample {
                op: start,
                ..MemorySample::default()
            });
        }
        self.samples.last_mut().expect("just pushed")
    }
}

impl ReplayObserver for ReplayRecorder {
    fn before_alloc(&mut self, op: usize, _size: u64, stream: u32) {
        self.stream = stream;
        self.op = op as u64;
        self.sample_mut(op as u64);
    }

    fn on_alloc(&mut self, op: usize, allocation: &Allocation, stream: u32) {
        let addr = self.address_of(allocation);
        self.history.record(Event::new(
            Action::Alloc,
            addr,
            allocation.requested,
            stream,
            op as u64,
        ));
    }

    fn on_free(&mut self, op: usize, allocation: &Allocation, stream: u32) {
        let addr = self.address_of(allocation);
        self.op = op as u64;
        self.sample_mut(op as u64);
        self.history.record(Event::new(
            Action::FreeCompleted,
            addr,
            allocation.requested,
            stream,
            op as u64,
        ));
    }

    fn on_oom(&mut self, op: usize, size: u64, stream: u32) {
        self.history
            .record(Event::new(Action::Oom, 0, size, stream, op as u64));
    }

    fn on_segment_create(&mut self, id: SegmentId, size: u64, _pool: SegmentKind) {
        let addr = self.next_address;
        self.next_address += size.div_ceil(SEGMENT_ALIGN) * SEGMENT_ALIGN;
        self.addresses.insert(id, addr);
        self.streams.insert(id, self.stream);
        let op = self.op;
        self.sample_mut(op).segments_created += 1;
        self.history.record(Event::new(
            Action::SegmentAlloc,
            addr,
            size,
            self.stream,
            op,
        ));
    }

    fn on_segment_release(&mut self, id: SegmentId, size: u64) {
        let addr = self.addresses.remove(&id).unwrap_or(0);
        let stream = self.streams.remove(&id).unwrap_or(0);
        let op = self.op;
        self.sample_mut(op).segments_released += 1;
        self.history
            .record(Event::new(Action::SegmentFree, addr, size, stream, op));
    }

    fn on_range_reserve(&mut self, id: SegmentId, size: u64, _kind: SegmentKind) {
        let addr = self.next_address;
        self.next_address += size.div_ceil(SEGMENT_ALIGN) * SEGMENT_ALIGN;
        self.addresses.insert(id, addr);
        self.streams.insert(id, self.stream);
    }

    fn on_range_release(&mut self, id: SegmentId, _size: u64) {
        self.addresses.remove(&id);
        self.streams.remove(&id);
    }

    fn on_map(&mut self, id: SegmentId, runs: &[std::ops::Range<u64>]) {
        self.record_runs(Action::SegmentMap, id, runs);
    }

    fn on_unmap(&mut self, id: SegmentId, runs: &[std::ops::Range<u64>]) {
        self.record_runs(Action::SegmentUnmap, id, runs);
    }

    fn after_op(&mut self, op: usize, engine: &Engine, live: u64) {
        let stats = engine.memory_stats();
        let reserved = stats.reserved_bytes.all.current;
        if reserved > self.peak.0 {
            self.peak = (reserved, op as u64);
        }
        let sample = self.sample_mut(op as u64);
        sample.live = sample.live.max(live);
        sample.allocated = sample.allocated.max(stats.allocated_bytes.all.current);
        sample.reserved = sample.reserved.max(reserved);
    }

    fn finish(&mut self, engine: &Engine) {
        self.final_segments = engine.snapshot();
    }
}

impl super::SegmentPlacement for ReplayRecorder {
    fn address(&self, segment: &SegmentSnapshot) -> u64 {
        self.segment_address(segment.id).unwrap_or(0)
    }

    fn stream(&self, segment: &SegmentSnapshot) -> u32 {
        self.segment_stream(segment.id)
    }
}

impl ReplayRecorder {
    /// The replay as a PyTorch snapshot: its final layout and recorded events, `time_us`
    /// being the operation index.
    pub fn torch_snapshot(&self, conf: &str) -> super::TorchSnapshot {
        super::TorchSnapshot::new(&self.final_segments, self, &self.history, conf, "op")
    }
}
