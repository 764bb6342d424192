//! Snapshots of the engine's layout, and the recount that checks its invariants.

use super::invariant_error::InvariantError;
use super::links::NONE;
use super::page_layout::UnmappedOrder;
use super::rounding::{MIN_BLOCK_SIZE, SegmentKind};
use super::state::EngineState;
use super::types::SegmentId;

/// One block of a segment, as [`Engine::snapshot`](super::Engine::snapshot) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockSnapshot {
    /// Offset in the segment.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Whether a caller holds it.
    pub allocated: bool,
    /// The caller's size, for allocated blocks.
    pub requested: u64,
    /// Whether memory is mapped behind it: always, but for the unmapped address space of a
    /// range in pages mode (never allocated).
    pub mapped: bool,
    /// Of an allocated block in pages mode, the bytes of its interior pages unmapped while it
    /// is evicted (0 otherwise; see [`Engine::evict`](super::Engine::evict)).
    pub evicted_bytes: u64,
    /// The label the block was allocated with, where the caller keeps labels (the wgpu
    /// pool's `Pool::alloc_labeled`); the engine itself has none.
    pub label: Option<String>,
}

/// One segment and its blocks in address order (like `torch.cuda.memory_snapshot()`). In
/// pages mode a segment is an address range, and its blocks include unmapped ones.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentSnapshot {
    /// The segment's id in the [`SegmentSource`](super::SegmentSource).
    pub id: SegmentId,
    /// Its address (the first block's address).
    pub address: u64,
    /// Its size.
    pub size: u64,
    /// Its kind (PyTorch's small or large pool).
    pub kind: SegmentKind,
    /// Its stream.
    pub stream: u32,
    /// Its blocks, lowest offset first, covering the segment exactly.
    pub blocks: Vec<BlockSnapshot>,
}

impl EngineState {
    /// Every segment with its blocks, in segment-id order.
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        let mut out = Vec::new();
        for (id, s) in self.segments.iter().enumerate() {
            if !s.in_use {
                continue;
            }
            let mut blocks = Vec::new();
            let mut cursor = s.head;
            while cursor != NONE {
                let b = &self.blocks[cursor as usize];
                let allocated = self.links.is_allocated(cursor);
                blocks.push(BlockSnapshot {
                    offset: b.offset(),
                    size: b.size(),
                    allocated,
                    requested: if allocated { b.requested } else { 0 },
                    mapped: !self.links.is_unmapped(cursor),
                    evicted_bytes: self
                        .pages
                        .evicted
                        .get(&cursor)
                        .filter(|_| allocated)
                        .map_or(0, |run| run.end - run.start),
                    label: None,
                });
                cursor = self.links.next(cursor);
            }
            out.push(SegmentSnapshot {
                id: SegmentId(id as u32),
                address: s.base,
                size: s.size,
                kind: s.kind,
                stream: s.stream,
                blocks,
            });
        }
        out
    }

    /// Recounts every current statistic from the layout and checks the structural
    /// invariants: blocks tile their segment without gaps or overlap, are 512 B aligned, no
    /// two free blocks are adjacent, every free block is indexed exactly once and no
    /// allocated block is. In pages mode also: unmapped blocks start and end on page borders,
    /// no two are adjacent, none is allocated, each is indexed once; `reserved_bytes` is the
    /// mapped bytes; the idle pages list holds exactly the free blocks with a whole page; no
    /// memory is spare between calls. Returns the first violation.
    pub fn check_invariants(&self) -> Result<(), InvariantError> {
        let mut counted = super::MemoryStats::default();
        let mut indexed_free = 0usize;
        let mut unmapped_blocks = 0usize;
        let mut idle = Vec::new();
        let mut idle_pages = Vec::new();
        for segment in self.snapshot() {
            let s = &self.segments[segment.id.0 as usize];
            let kind = segment.kind;
            let page = self.page_of(kind);
            if !self.pages_mode {
                if let [only] = segment.blocks.as_slice()
                    && !only.allocated
                {
                    idle.push((s.idle_since, segment.id.0));
                }
                counted.segment.increase(kind, 1);
                counted.reserved_bytes.increase(kind, segment.size);
                if self.is_oversize(segment.size) {
                    counted.oversize_segments.increase(1);
                }
            } else if segment.size % page != 0 {
                return Err(InvariantError::Layout(format!(
                    "range {:?} of {} B is not whole pages of {page} B",
                    segment.id, segment.size
                )));
            }
            let mut expected_offset = 0;
            let mut previous_free = false;
            let mut previous_unmapped = false;
            let split = segment.blocks.len() > 1;
            for b in &segment.blocks {
                if b.offset != expected_offset {
                    return Err(InvariantError::Layout(format!(
                        "segment {:?}: block at {} but expected {}",
                        segment.id, b.offset, expected_offset
                    )));
                }
                if b.size == 0 || b.offset % MIN_BLOCK_SIZE != 0 || b.size % MIN_BLOCK_SIZE != 0 {
                    return Err(InvariantError::Layout(format!(
                        "segment {:?}: block {}+{} is not 512 B aligned",
                        segment.id, b.offset, b.size
                    )));
                }
                expected_offset += b.size;
                if !b.mapped {
                    if !self.pages_mode || b.allocated {
                        return Err(InvariantError::Layout(format!(
                            "segment {:?}: block at {} is unmapped but {}",
                            segment.id,
                            b.offset,
                            if b.allocated {
                                "allocated"
                            } else {
                                "not in pages mode"
                            }
                        )));
                    }
                    if b.offset % page != 0 || b.size % page != 0 {
                        return Err(InvariantError::Layout(format!(
                            "range {:?}: unmapped block {}+{} is not whole pages of {page} B",
                            segment.id, b.offset, b.size
                        )));
                    }
                    if previous_unmapped {
                        return Err(InvariantError::Layout(format!(
                            "range {:?}: two adjacent unmapped blocks at {}",
                            segment.id, b.offset
                        )));
                    }
                    previous_unmapped = true;
                    previous_free = false;
                    unmapped_blocks += 1;
                    continue;
                }
                previous_unmapped = false;
                if self.pages_mode {
                    counted
                        .reserved_bytes
                        .increase(kind, b.size - b.evicted_bytes);
                }
                if b.allocated {
                    previous_free = false;
                    counted.allocation.increase(kind, 1);
                    counted.active.increase(kind, 1);
                    counted.allocated_bytes.increase(kind, b.size);
                    counted.active_bytes.increase(kind, b.size);
                    counted.requested_bytes.increase(kind, b.requested);
                    if self.is_oversize(b.size) {
                        counted.oversize_allocations.increase(1);
                    }
                } else {
                    if previous_free {
                        return Err(InvariantError::Layout(format!(
                            "segment {:?}: two adjacent free blocks at {}",
                            segment.id, b.offset
                        )));
                    }
                    previous_free = true;
                    indexed_free += 1;
                    if self.pages_mode {
                        if super::page_layout::holds_page(b.offset, b.size, page) {
                            idle_pages.push((segment.id.0, b.offset));
                        }
                    } else if split {
                        counted.inactive_split.increase(kind, 1);
                        counted.inactive_split_bytes.increase(kind, b.size);
                    }
                }
            }
            if expected_offset != segment.size {
                return Err(InvariantError::Layout(format!(
                    "segment {:?}: blocks cover {} of {} bytes",
                    segment.id, expected_offset, segment.size
                )));
            }
            let mut cursor = s.head;
            let mut previous = NONE;
            while cursor != NONE {
                let b = &self.blocks[cursor as usize];
                if !b.in_use || b.segment != segment.id.0 || self.links.prev(cursor) != previous {
                    return Err(InvariantError::Layout(format!(
                        "segment {:?}: block {cursor} is not linked into it",
                        segment.id
                    )));
                }
                if (b.kind, b.stream, b.base) != (s.kind, s.stream, s.base) {
                    return Err(InvariantError::Layout(format!(
                        "segment {:?}: block {cursor} has a stale copy of the segment's kind, stream or base",
                        segment.id
                    )));
                }
                previous = cursor;
                cursor = self.links.next(cursor);
            }
        }
        for kind in [SegmentKind::Small, SegmentKind::Large] {
            for key in self.free_index[kind.index()].iter() {
                let b = &self.blocks[key.block as usize];
                if !b.in_use
                    || !self.links.is_free_block(key.block)
                    || key != self.key_of(key.block)
                {
                    return Err(InvariantError::Index(format!(
                        "free index entry {key:?} does not match its block"
                    )));
                }
                if self.segments[b.segment as usize].kind != kind {
                    return Err(InvariantError::Index(format!(
                        "block {} indexed under the wrong segment kind",
                        key.block
                    )));
                }
            }
            let by_size = self.pages.unmapped_by_size[kind.index()].iter();
            let by_address = self.pages.unmapped_by_address[kind.index()]
                .iter()
                .map(|&(_, _, block)| self.key_of(block));
            for key in by_size.chain(by_address) {
                let b = &self.blocks[key.block as usize];
                if !b.in_use
                    || !self.links.is_unmapped_block(key.block)
                    || key != self.key_of(key.block)
                    || b.kind != kind
                {
                    return Err(InvariantError::Index(format!(
                        "unmapped index entry {key:?} does not match its block"
                    )));
                }
            }
        }
        // Evicted blocks are allocated, and their run is their whole interior pages.
        for (&record, run) in &self.pages.evicted {
            if !self.blocks[record as usize].in_use
                || !self.links.is_allocated(record)
                || self.interior(record).as_ref() != Some(run)
            {
                return Err(InvariantError::Index(format!(
                    "evicted block {record} with run {run:?} is not an allocated block with \
                     that interior"
                )));
            }
        }
        // One index holds every unmapped block; the other, which the policy does not read,
        // stays empty.
        let by_size: usize = self.pages.unmapped_by_size.iter().map(|i| i.len()).sum();
        let by_address: usize = self.pages.unmapped_by_address.iter().map(|i| i.len()).sum();
        let (kept, other) = match self.pages.order {
            UnmappedOrder::Size => (by_size, by_address),
            UnmappedOrder::Address => (by_address, by_size),
        };
        if kept != unmapped_blocks || other != 0 {
            return Err(InvariantError::Index(format!(
                "{unmapped_blocks} unmapped blocks, {by_size} indexed by size and \
                 {by_address} by address ({:?} kept)",
                self.pages.order
            )));
        }
        // The list holds exactly the wholly free segments, least recently idle first.
        idle.sort_unstable();
        let listed: Vec<(u64, u32)> = self
            .idle_segments
            .iter()
            .map(|s| (self.segments[s as usize].idle_since, s))
            .collect();
        if listed != idle || self.idle_segments.len() != idle.len() {
            return Err(InvariantError::Index(format!(
                "idle segments {idle:?} but the engine lists {listed:?}"
            )));
        }
        // In pages mode, the idle pages list holds exactly the free blocks with a whole page.
        idle_pages.sort_unstable();
        let mut listed: Vec<(u32, u64)> = self
            .pages
            .idle_pages
            .iter()
            .map(|b| {
                (
                    self.blocks[b as usize].segment,
                    self.blocks[b as usize].offset(),
                )
            })
            .collect();
        listed.sort_unstable();
        if listed != idle_pages || self.pages.idle_pages.len() != idle_pages.len() {
            return Err(InvariantError::Index(format!(
                "free blocks with idle pages {idle_pages:?} but the engine lists {listed:?}"
            )));
        }
        if self.pages.stats.spare_bytes != 0 {
            return Err(InvariantError::Statistics(format!(
                "{} bytes spare between calls",
                self.pages.stats.spare_bytes
            )));
        }
        let indexed = self.free_index[0].len() + self.free_index[1].len();
        if indexed != indexed_free {
            return Err(InvariantError::Index(format!(
                "{indexed} blocks indexed but {indexed_free} free blocks exist"
            )));
        }
        if counted.currents() != self.stats.with_active().currents() {
            return Err(InvariantError::Statistics(format!(
                "statistics differ from a recount:\n  kept    {:?}\n  counted {:?}",
                self.stats.with_active().currents(),
                counted.currents()
            )));
        }
        Ok(())
    }
}
