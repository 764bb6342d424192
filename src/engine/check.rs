//! Snapshots of the engine's layout, and the recount that checks its invariants.

use super::links::NONE;
use super::rounding::{MIN_BLOCK_SIZE, SegmentKind};
use super::state::EngineState;
use super::types::SegmentId;

/// One block of a segment, as [`Engine::snapshot`](super::Engine::snapshot) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSnapshot {
    /// Offset in the segment.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Whether a caller holds it.
    pub allocated: bool,
    /// The caller's size, for allocated blocks.
    pub requested: u64,
}

/// One segment and its blocks in address order (like `torch.cuda.memory_snapshot()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSnapshot {
    /// The segment's id in the [`SegmentSource`](super::SegmentSource).
    pub id: SegmentId,
    /// Its address (the first block's address).
    pub address: u64,
    /// Its size.
    pub size: u64,
    /// Its pool.
    pub pool: SegmentKind,
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
                });
                cursor = self.links.next(cursor);
            }
            out.push(SegmentSnapshot {
                id: SegmentId(id as u32),
                address: s.base,
                size: s.size,
                pool: s.pool,
                stream: s.stream,
                blocks,
            });
        }
        out
    }

    /// Recounts every current statistic from the layout and checks the structural
    /// invariants: blocks tile their segment without gaps or overlap, are 512 B aligned, no
    /// two free blocks are adjacent, every free block is indexed exactly once and no
    /// allocated block is. Returns a description of the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut counted = super::MemoryStats::default();
        let mut indexed_free = 0usize;
        let mut idle = Vec::new();
        for segment in self.snapshot() {
            let s = &self.segments[segment.id.0 as usize];
            if let [only] = segment.blocks.as_slice()
                && !only.allocated
            {
                idle.push((s.idle_since, segment.id.0));
            }
            let pool = segment.pool;
            counted.segment.increase(pool, 1);
            counted.reserved_bytes.increase(pool, segment.size);
            if self.is_oversize(segment.size) {
                counted.oversize_segments.increase(1);
            }
            let mut expected_offset = 0;
            let mut previous_free = false;
            let split = segment.blocks.len() > 1;
            for b in &segment.blocks {
                if b.offset != expected_offset {
                    return Err(format!(
                        "segment {:?}: block at {} but expected {}",
                        segment.id, b.offset, expected_offset
                    ));
                }
                if b.size == 0 || b.offset % MIN_BLOCK_SIZE != 0 || b.size % MIN_BLOCK_SIZE != 0 {
                    return Err(format!(
                        "segment {:?}: block {}+{} is not 512 B aligned",
                        segment.id, b.offset, b.size
                    ));
                }
                expected_offset += b.size;
                if b.allocated {
                    previous_free = false;
                    counted.allocation.increase(pool, 1);
                    counted.active.increase(pool, 1);
                    counted.allocated_bytes.increase(pool, b.size);
                    counted.active_bytes.increase(pool, b.size);
                    counted.requested_bytes.increase(pool, b.requested);
                    if self.is_oversize(b.size) {
                        counted.oversize_allocations.increase(1);
                    }
                } else {
                    if previous_free {
                        return Err(format!(
                            "segment {:?}: two adjacent free blocks at {}",
                            segment.id, b.offset
                        ));
                    }
                    previous_free = true;
                    indexed_free += 1;
                    if split {
                        counted.inactive_split.increase(pool, 1);
                        counted.inactive_split_bytes.increase(pool, b.size);
                    }
                }
            }
            if expected_offset != segment.size {
                return Err(format!(
                    "segment {:?}: blocks cover {} of {} bytes",
                    segment.id, expected_offset, segment.size
                ));
            }
            let mut cursor = s.head;
            let mut previous = NONE;
            while cursor != NONE {
                let b = &self.blocks[cursor as usize];
                if !b.in_use || b.segment != segment.id.0 || self.links.prev(cursor) != previous {
                    return Err(format!(
                        "segment {:?}: block {cursor} is not linked into it",
                        segment.id
                    ));
                }
                if (b.pool, b.stream, b.base) != (s.pool, s.stream, s.base) {
                    return Err(format!(
                        "segment {:?}: block {cursor} has a stale copy of the segment's pool, stream or base",
                        segment.id
                    ));
                }
                previous = cursor;
                cursor = self.links.next(cursor);
            }
        }
        for pool in [SegmentKind::Small, SegmentKind::Large] {
            for key in self.free_index[pool.index()].iter() {
                let b = &self.blocks[key.block as usize];
                if !b.in_use || self.links.is_allocated(key.block) || key != self.key_of(key.block)
                {
                    return Err(format!("free index entry {key:?} does not match its block"));
                }
                if self.segments[b.segment as usize].pool != pool {
                    return Err(format!("block {} indexed in the wrong pool", key.block));
                }
            }
        }
        // The list holds exactly the wholly free segments, least recently idle first.
        idle.sort_unstable();
        let listed: Vec<(u64, u32)> = self
            .idle
            .iter()
            .map(|s| (self.segments[s as usize].idle_since, s))
            .collect();
        if listed != idle || self.idle.len() != idle.len() {
            return Err(format!(
                "idle segments {idle:?} but the engine lists {listed:?}"
            ));
        }
        let indexed = self.free_index[0].len() + self.free_index[1].len();
        if indexed != indexed_free {
            return Err(format!(
                "{indexed} blocks indexed but {indexed_free} free blocks exist"
            ));
        }
        if counted.currents() != self.stats.currents() {
            return Err(format!(
                "statistics differ from a recount:\n  kept    {:?}\n  counted {:?}",
                self.stats.currents(),
                counted.currents()
            ));
        }
        Ok(())
    }
}
