//! Recording a replay: its events with addresses, its final layout, and memory over time.

use std::ops::Range;

use super::{Action, EventLog, EventObserver, History, TorchSnapshot};
use crate::engine::{Allocation, Engine, SegmentId, SegmentKind, SegmentSnapshot};

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
    /// Bytes of mapped pages, for a pool in pages mode (0 with fixed segments).
    pub mapped: u64,
    /// Bytes of evicted blocks' pages kept in host memory by a pool with residency (0 in a
    /// replay, which has none; see [`Timeline`](super::Timeline)).
    pub evicted: u64,
    /// Device allocations in the bucket, as PyTorch's `num_device_alloc` counts them:
    /// segments created, or in pages mode maps.
    pub device_allocs: u32,
    /// Device frees in the bucket (`num_device_free`): segments released, or unmaps.
    pub device_frees: u32,
}

/// An [`EventObserver`] of a replay that records an [`EventLog`] (time: the operation's
/// index), the final layout, and [`MemorySample`]s.
#[derive(Debug)]
pub struct ReplayRecorder {
    log: EventLog,
    stream: u32,
    /// The operation running now.
    op: u64,
    ops: u64,
    bucket: u64,
    samples: Vec<MemorySample>,
    final_segments: Vec<SegmentSnapshot>,
    peak: (u64, u64),
    /// Bytes of pages mapped now.
    mapped: u64,
}

impl ReplayRecorder {
    /// A recorder keeping at most `capacity` events, for a trace of `ops` operations.
    pub fn new(capacity: usize, ops: usize) -> ReplayRecorder {
        ReplayRecorder {
            log: EventLog::with_capacity(capacity),
            stream: 0,
            op: 0,
            ops: ops as u64,
            bucket: (ops as u64).div_ceil(MAX_SAMPLES as u64).max(1),
            samples: Vec::new(),
            final_segments: Vec::new(),
            peak: (0, 0),
            mapped: 0,
        }
    }

    /// The events.
    pub fn history(&self) -> &History {
        self.log.history()
    }

    /// The segments and blocks at the end of the replay.
    pub fn final_segments(&self) -> &[SegmentSnapshot] {
        &self.final_segments
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

    /// The replay as a PyTorch snapshot: its final layout and recorded events, `time_us`
    /// being the operation index.
    pub fn torch_snapshot(&self, conf: &str) -> TorchSnapshot {
        self.log.torch_snapshot(&self.final_segments, conf, "op")
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

impl EventObserver for ReplayRecorder {
    fn before_alloc(&mut self, op: usize, _size: u64, stream: u32) {
        self.stream = stream;
        self.op = op as u64;
        self.sample_mut(op as u64);
    }

    fn on_alloc(&mut self, op: usize, allocation: &Allocation, stream: u32) {
        self.log.block(Action::Alloc, allocation, stream, op as u64);
    }

    fn on_free(&mut self, op: usize, allocation: &Allocation, stream: u32) {
        self.op = op as u64;
        self.sample_mut(op as u64);
        self.log
            .block(Action::FreeCompleted, allocation, stream, op as u64);
    }

    fn on_oom(&mut self, op: usize, size: u64, stream: u32) {
        self.log.oom(size, stream, op as u64);
    }

    fn on_segment_create(&mut self, id: SegmentId, size: u64, _kind: SegmentKind) {
        let op = self.op;
        self.sample_mut(op).device_allocs += 1;
        self.log.segment_created(id, size, self.stream, op);
    }

    fn on_segment_release(&mut self, id: SegmentId, size: u64) {
        let op = self.op;
        self.sample_mut(op).device_frees += 1;
        self.log.segment_released(id, size, op);
    }

    fn on_range_reserve(&mut self, id: SegmentId, size: u64, _kind: SegmentKind) {
        self.log.place(id, size, self.stream);
    }

    fn on_range_release(&mut self, id: SegmentId, _size: u64) {
        self.log.unplace(id);
    }

    fn on_map(&mut self, id: SegmentId, runs: &[Range<u64>]) {
        let op = self.op;
        self.sample_mut(op).device_allocs += 1;
        self.log.pages(Action::SegmentMap, id, runs, self.op);
        self.mapped += runs.iter().map(|r| r.end - r.start).sum::<u64>();
    }

    fn on_unmap(&mut self, id: SegmentId, runs: &[Range<u64>]) {
        let op = self.op;
        self.sample_mut(op).device_frees += 1;
        self.log.pages(Action::SegmentUnmap, id, runs, self.op);
        let unmapped: u64 = runs.iter().map(|r| r.end - r.start).sum();
        self.mapped = self.mapped.saturating_sub(unmapped);
    }

    fn after_op(&mut self, op: usize, engine: &Engine, live: u64) {
        let stats = engine.memory_stats();
        let reserved = stats.reserved_bytes.all.current;
        if reserved > self.peak.0 {
            self.peak = (reserved, op as u64);
        }
        let mapped = self.mapped;
        let sample = self.sample_mut(op as u64);
        sample.mapped = sample.mapped.max(mapped);
        sample.live = sample.live.max(live);
        sample.allocated = sample.allocated.max(stats.allocated_bytes.all.current);
        sample.reserved = sample.reserved.max(reserved);
    }

    fn finish(&mut self, engine: &Engine) {
        self.final_segments = engine.snapshot();
    }
}
