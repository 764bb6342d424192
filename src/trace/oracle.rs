//! Traces as an oracle: checking every placement against the addresses PyTorch handed out.
//!
//! A trace recorded from PyTorch (`tools/oracle/replay_torch.py`) names each allocation by
//! the address PyTorch returned, and writes `oom,0,SIZE,STREAM` where PyTorch refused one. In
//! PyTorch's native mode the allocation that makes a segment sits at the segment's base, so
//! the trace also says where every segment PyTorch created lives. [`OracleSegments`] hands
//! those addresses to the engine as segment addresses (as `cudaMalloc` would); with the same
//! addresses, the engine's best fit by (stream, size, address) must then pick exactly the
//! block PyTorch picked, and [`OracleCheck`] compares every allocation's address and every
//! out-of-memory with the trace's.
//!
//! With expandable segments PyTorch reserves one virtual range per segment and maps pages
//! into it; the first allocation in a fresh range sits at its start, so the same rule gives
//! the range's address. The engine asks its [`SegmentSource`] for an address whenever it
//! reserves a range, whatever kind of segment it is.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;

use serde::Serialize;

use crate::config::Config;
use crate::engine::CudaAddressModel;
use crate::engine::rounding::{SegmentKind, round_request};
use crate::engine::{
    AllocError, Allocation, Engine, PageMapping, SegmentId, SegmentSnapshot, SegmentSource,
    SourceError, VirtualSegments,
};

/// Where a segment goes when the trace's address cannot be used (it overlaps a live
/// segment: PyTorch reused memory that the engine still holds), far above CUDA's addresses.
const FALLBACK_BASE: u64 = 1 << 52;

/// Virtual segments whose addresses come from the trace, or else from a model of CUDA's.
///
/// Before each allocation, [`expect`](OracleSegments::expect) gives the address PyTorch
/// returned for it; if the engine creates a segment for that allocation, the segment is put
/// at that address, unless that would overlap a live segment (the engine and PyTorch have
/// already parted ways), in which case it goes to a fresh address far from CUDA's.
///
/// A segment with no address from the trace goes where
/// [`with_cuda_addresses`](OracleSegments::with_cuda_addresses)' model of the CUDA driver
/// puts it, when one is given (plain replay of `policy:pytorch`), and otherwise to a fresh
/// address far from CUDA's. Address ranges never take the model's addresses: PyTorch
/// reserves them with `cuMemAddressReserve`, which the model does not cover.
#[derive(Debug, Default)]
pub struct OracleSegments {
    /// The simulated device: sizes, counts, an optional limit.
    pub device: VirtualSegments,
    expected: Option<u64>,
    /// Live segments: base -> end.
    live: BTreeMap<u64, u64>,
    base_of: HashMap<SegmentId, u64>,
    fallback: u64,
    cuda: Option<CudaAddressModel>,
    /// Live address ranges.
    ranges: HashSet<SegmentId>,
}

impl OracleSegments {
    /// A source over `device` that places segments where the trace says.
    pub fn new(device: VirtualSegments) -> Self {
        OracleSegments {
            device,
            fallback: FALLBACK_BASE,
            ..Default::default()
        }
    }

    /// This source, placing segments that have no address from the trace where `driver`
    /// says (`cudaMalloc` / `cudaFree` of each segment, in the engine's order).
    pub fn with_cuda_addresses(mut self, driver: CudaAddressModel) -> Self {
        self.cuda = Some(driver);
        self
    }

    /// The address the next allocation got in the recorded run (`None`: no address known).
    pub fn expect(&mut self, address: Option<u64>) {
        self.expected = address;
    }

    /// The traced process created a stream (PyTorch creates one before its first use);
    /// the CUDA model, if any, reserves address space for it.
    pub fn create_stream(&mut self) {
        if let Some(driver) = self.cuda.as_mut() {
            driver.create_stream();
        }
    }

    /// Forgets segment or range `id`'s address.
    fn forget(&mut self, id: SegmentId) -> Option<u64> {
        let base = self.base_of.remove(&id)?;
        self.live.remove(&base);
        Some(base)
    }

    fn overlaps(&self, base: u64, end: u64) -> bool {
        // The last segment starting below `end` is the only one that can reach into the range.
        self.live
            .range(..end)
            .next_back()
            .is_some_and(|(_, &live_end)| live_end > base)
    }

    /// The live segment holding `address`, as (base, end).
    pub fn segment_at(&self, address: u64) -> Option<(u64, u64)> {
        self.live
            .range(..=address)
            .next_back()
            .filter(|(_, end)| **end > address)
            .map(|(&base, &end)| (base, end))
    }
}

impl SegmentSource for OracleSegments {
    fn create_segment(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError> {
        self.device.create_segment(id, size, kind)
    }

    fn release_segment(&mut self, id: SegmentId, size: u64) {
        if let Some(base) = self.forget(id)
            && let Some(driver) = self.cuda.as_mut()
        {
            driver.free(base);
        }
        self.device.release_segment(id, size);
    }

    fn page_mapping(&self) -> Option<PageMapping> {
        self.device.page_mapping()
    }

    fn reserve_range(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError> {
        self.device.reserve_range(id, size, kind)?;
        self.ranges.insert(id);
        Ok(())
    }

    fn release_range(&mut self, id: SegmentId, size: u64) {
        self.ranges.remove(&id);
        self.forget(id);
        self.device.release_range(id, size);
    }

    fn map_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.device.map_pages(id, runs)
    }

    fn unmap_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.device.unmap_pages(id, runs)
    }

    fn release_spare(&mut self, bytes: u64) {
        self.device.release_spare(bytes);
    }

    fn segment_address(&mut self, id: SegmentId, size: u64, _kind: SegmentKind) -> Option<u64> {
        let modelled = match self.expected.take() {
            Some(base) => Some(base).filter(|&b| !self.overlaps(b, b.saturating_add(size))),
            None if self.ranges.contains(&id) => None,
            None => self.cuda.as_mut().and_then(|driver| driver.allocate(size)),
        };
        let base = modelled.unwrap_or_else(|| {
            let base = self.fallback;
            self.fallback += size.next_multiple_of(1 << 21);
            base
        });
        self.live.insert(base, base + size);
        self.base_of.insert(id, base);
        Some(base)
    }
}

/// What the recorded allocator did with one allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    /// Served at this address.
    Address {
        /// The block's address.
        address: u64,
    },
    /// Refused with out-of-memory.
    OutOfMemory,
}

/// A free block the engine could have chosen, in the order its best fit considers them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// The block's address.
    pub address: u64,
    /// Its size.
    pub size: u64,
    /// The address of its segment.
    pub segment_address: u64,
    /// Whether it spans its whole segment (an unsplit cached segment).
    pub whole_segment: bool,
}

/// The first allocation where the engine and the recorded allocator parted ways, with the
/// engine's view of why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// What the recorded allocator did.
    pub expected: Outcome,
    /// What the engine did.
    pub got: Outcome,
    /// The request: bytes asked for, the size the engine rounded it to, its stream (as
    /// numbered by the trace reader) and pool.
    pub size: u64,
    /// The rounded size.
    pub rounded: u64,
    /// The stream.
    pub stream: u32,
    /// `small_pool` or `large_pool`.
    pub pool: &'static str,
    /// Where the expected address lies in the engine's layout just before the allocation:
    /// in a free block (which the engine did not pick), in an allocated block, or outside
    /// every segment (PyTorch made a new segment there).
    pub expected_lies: String,
    /// The free blocks of the request's stream and pool that fit it, in best-fit order
    /// (size, then address), up to eight, just before the allocation.
    pub candidates: Vec<Candidate>,
    /// Free blocks of that stream and pool that fit, in all.
    pub candidates_total: usize,
}

/// The oracle's verdict on a whole trace (`oracle` in `wgpool replay --oracle --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OracleReport {
    /// Allocations checked (served or refused ones).
    pub checked: u64,
    /// Allocations whose outcome differed. After the first, the layouts differ, so later
    /// divergences may follow from it.
    pub divergences: u64,
    /// The line of the first divergence, if any.
    pub first_divergence_line: Option<usize>,
    /// What the recorded allocator did there.
    pub expected: Option<Outcome>,
    /// What the engine did there.
    pub got: Option<Outcome>,
    /// The engine's view of the first divergence.
    pub first_divergence: Option<Divergence>,
}

/// Counts agreements and divergences during one replay.
#[derive(Debug, Default)]
pub struct OracleCheck {
    /// Allocations checked.
    pub checked: u64,
    /// Divergences found.
    pub divergences: u64,
    /// The op index and outcomes of the first divergence.
    pub first: Option<(usize, Outcome, Outcome)>,
}

impl OracleCheck {
    /// Compares the engine's result for op `op` with the recorded outcome.
    pub fn compare(
        &mut self,
        op: usize,
        expected: Outcome,
        got: &Result<Allocation, AllocError>,
    ) -> bool {
        let got = match got {
            Ok(a) => Outcome::Address { address: a.address },
            Err(_) => Outcome::OutOfMemory,
        };
        self.checked += 1;
        if got == expected {
            return true;
        }
        self.divergences += 1;
        if self.first.is_none() {
            self.first = Some((op, expected, got));
        }
        false
    }
}

/// Describes a divergence from the engine's layout just before the diverging allocation.
pub fn explain(
    engine: &Engine,
    config: &Config,
    size: u64,
    stream: u32,
    expected: Outcome,
    got: Outcome,
) -> Divergence {
    let rounded = round_request(config, size);
    let kind = SegmentKind::for_size(rounded);
    let snapshot = engine.snapshot();
    let mut fitting: Vec<Candidate> = Vec::new();
    for segment in snapshot
        .iter()
        .filter(|s| s.kind == kind && s.stream == stream)
    {
        let mut offset = 0;
        let whole = segment.blocks.len() == 1;
        for block in &segment.blocks {
            if !block.allocated && block.size >= rounded {
                fitting.push(Candidate {
                    address: segment.address + offset,
                    size: block.size,
                    segment_address: segment.address,
                    whole_segment: whole,
                });
            }
            offset += block.size;
        }
    }
    fitting.sort_by_key(|c| (c.size, c.address));
    let candidates_total = fitting.len();
    fitting.truncate(8);
    let expected_lies = match expected {
        Outcome::OutOfMemory => "nowhere: PyTorch refused the allocation".to_string(),
        Outcome::Address { address } => where_is(&snapshot, address),
    };
    Divergence {
        expected,
        got,
        size,
        rounded,
        stream,
        pool: kind.stat_name(),
        expected_lies,
        candidates: fitting,
        candidates_total,
    }
}

fn where_is(snapshot: &[SegmentSnapshot], address: u64) -> String {
    for segment in snapshot {
        if address < segment.address || address >= segment.address + segment.size {
            continue;
        }
        let mut offset = 0;
        for block in &segment.blocks {
            let start = segment.address + offset;
            if address >= start && address < start + block.size {
                let state = if block.allocated { "allocated" } else { "free" };
                return format!(
                    "in a {state} block of {} B at {start} (offset {} of the {} B {} segment \
                     at {}, stream {})",
                    block.size,
                    address - segment.address,
                    segment.size,
                    segment.kind.stat_name(),
                    segment.address,
                    segment.stream
                );
            }
            offset += block.size;
        }
    }
    "outside every segment: PyTorch created a segment there".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_go_where_the_trace_says_unless_that_overlaps() {
        let mut source = OracleSegments::new(VirtualSegments::unlimited());
        source.expect(Some(1 << 30));
        source
            .create_segment(SegmentId(0), 20 << 20, SegmentKind::Large)
            .unwrap();
        assert_eq!(
            source.segment_address(SegmentId(0), 20 << 20, SegmentKind::Large),
            Some(1 << 30)
        );
        assert_eq!(
            source.segment_at((1 << 30) + 5),
            Some((1 << 30, (1 << 30) + (20 << 20)))
        );
        // An address inside the live segment cannot be used again.
        source.expect(Some((1 << 30) + (2 << 20)));
        let other = source.segment_address(SegmentId(1), 2 << 20, SegmentKind::Small);
        assert_eq!(other, Some(FALLBACK_BASE));
        // Nor can one whose range reaches into it.
        source.expect(Some((1 << 30) - (1 << 20)));
        let third = source.segment_address(SegmentId(2), 2 << 20, SegmentKind::Small);
        assert_ne!(third, Some((1 << 30) - (1 << 20)));
        // Once released, the range is free again.
        source.release_segment(SegmentId(0), 20 << 20);
        source.expect(Some(1 << 30));
        assert_eq!(
            source.segment_address(SegmentId(3), 20 << 20, SegmentKind::Large),
            Some(1 << 30)
        );
    }
}
