//! Splitting a found block for a request, and merging a freed block with its free
//! neighbours (PyTorch's `alloc_found_block` and `free_block`), over packed block records.

use super::links::NONE;
use super::preload::preload_record;
use super::records::{BlockCold, BlockRecord, SegmentFields};
use super::rounding::{MIN_BLOCK_SIZE, SegmentKind};
use super::state::EngineState;
use super::stats::StatArray;
use super::types::{Allocation, BlockId, MAX_SEGMENT_SIZE, SegmentId};

impl EngineState {
    /// Returns the live block `index` to the free blocks: statistics, then the merge with
    /// free neighbours. Returns the merged free block.
    pub fn free_block(&mut self, index: u32) -> u32 {
        // A free neighbour's record is read by the merge: start loading it while the
        // statistics update. Allocated neighbours are not touched at all.
        let (prev, next) = (self.links.prev(index), self.links.next(index));
        if self.links.is_free_block(prev) {
            preload_record(&self.blocks, prev);
        }
        if self.links.is_free_block(next) {
            preload_record(&self.blocks, next);
        }
        self.links.set_allocated(index, false);
        self.count_free(index);
        self.merge_free_block(index)
    }

    /// Counts live block `index` as freed in the statistics (the layout is the caller's).
    pub(super) fn count_free(&mut self, index: u32) {
        let (kind, size, requested) = {
            let b = &self.blocks[index as usize];
            (b.kind, b.size(), b.requested)
        };
        self.stats.allocation.decrease(kind, 1);
        self.stats.allocated_bytes.decrease(kind, size);
        if self.is_oversize(size) {
            self.stats.oversize_allocations.decrease(1);
        }
        self.stats.requested_bytes.decrease(kind, requested);
    }

    /// Marks a found free block allocated, splitting off the tail when worthwhile
    /// (PyTorch's `alloc_found_block`).
    pub fn take_block(&mut self, block: u32, rounded: u64, requested: u64) -> Allocation {
        let (segment, block_size, kind) = {
            let b = &self.blocks[block as usize];
            (b.segment, b.size(), b.kind)
        };
        let pages_mode = self.pages_mode;
        let already_split = self.is_split(block);
        if !already_split && !pages_mode {
            // A cached segment goes back to work (a new one was never idle).
            self.idle_segments.remove(segment);
        }
        let split = self.should_split(kind, block_size, rounded);
        if split {
            let remaining_size = block_size - rounded;
            let offset = self.blocks[block as usize].offset();
            let next = self.links.next(block);
            // The remainder copies the segment's fields from the block, whose record is
            // already cached, rather than from the segment's.
            let of = self.blocks[block as usize].segment_fields();
            let remainder = self.new_block_record(of, offset + rounded, remaining_size);
            self.links.set_prev(remainder, block);
            self.links.set_next(remainder, next);
            self.mark_freed(remainder, kind);
            if next != NONE {
                self.links.set_prev(next, remainder);
            }
            self.links.set_next(block, remainder);
            self.blocks[block as usize].set_size(rounded);
            let key = self.key_of(remainder);
            self.free_index[kind.index()].insert(key);
            if pages_mode {
                // The remainder keeps the block's place among idle pages, if it has one.
                let cut = (offset + rounded, remaining_size);
                self.pages_hand_over(block, remainder, kind, cut);
            } else if already_split {
                self.stats.inactive_split_bytes.decrease(kind, rounded);
            } else {
                self.stats
                    .inactive_split_bytes
                    .increase(kind, remaining_size);
                self.stats.inactive_split.increase(kind, 1);
            }
        } else if pages_mode {
            self.pages.idle_pages.remove(block);
        } else if already_split {
            self.stats.inactive_split_bytes.decrease(kind, block_size);
            self.stats.inactive_split.decrease(kind, 1);
        }
        self.links.set_allocated(block, true);
        let b = &mut self.blocks[block as usize];
        b.requested = requested;
        // A fresh id for every allocation, so a handle kept past its free is refused even
        // when the same record serves the next request.
        b.serial = b.serial.wrapping_add(1);
        let (size, offset, serial, address) = (b.size(), b.offset(), b.serial, b.address());
        self.stats.allocation.increase(kind, 1);
        self.stats.allocated_bytes.increase(kind, size);
        self.lifetime_allocated_peak = self
            .lifetime_allocated_peak
            .max(self.stats.allocated_bytes.all.current);
        self.stats.requested_bytes.increase(kind, requested);
        self.lifetime_requested_peak = self
            .lifetime_requested_peak
            .max(self.stats.requested_bytes.all.current);
        self.lifetime_requested_total = self.lifetime_requested_total.saturating_add(requested);
        if self.is_oversize(size) {
            self.stats.oversize_allocations.increase(1);
        }
        Allocation {
            block: BlockId {
                index: block,
                serial,
            },
            segment: SegmentId(segment),
            offset,
            block_size: size,
            requested,
            kind,
            address,
        }
    }

    /// Merges a just-freed block with its free neighbours, indexes the result, updates the
    /// inactive-split statistics (PyTorch's `free_block`; pages mode keeps none, as PyTorch
    /// does for expandable segments, and lists idle pages instead), and returns the merged
    /// block. Unmapped neighbours never merge with it.
    pub fn merge_free_block(&mut self, block: u32) -> u32 {
        let merged = self.merge_free_block_unindexed(block);
        let kind = self.blocks[merged as usize].kind;
        let key = self.key_of(merged);
        self.free_index[kind.index()].insert(key);
        merged
    }

    /// [`Self::merge_free_block`] but for the last step: the merged block is left out of
    /// the free index, for a caller that takes it at once.
    #[inline(always)]
    pub fn merge_free_block_unindexed(&mut self, block: u32) -> u32 {
        let kind = self.blocks[block as usize].kind;
        let freed_size = self.blocks[block as usize].size();
        let pages_mode = self.pages_mode;
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        let prev = self.links.prev(block);
        let mut block = block;
        if self.links.is_free_block(prev) {
            let key = self.key_of(prev);
            self.free_index[kind.index()].remove(&key);
            if pages_mode {
                self.pages.idle_pages.remove(prev);
            }
            // The lower neighbour survives so that the segment head never changes.
            self.absorb_next(prev);
            net_blocks -= 1;
            net_bytes -= key.size as i64;
            block = prev;
        }
        let next = self.links.next(block);
        if self.links.is_free_block(next) {
            let key = self.key_of(next);
            self.free_index[kind.index()].remove(&key);
            if pages_mode {
                self.pages.idle_pages.remove(next);
            }
            self.absorb_next(block);
            net_blocks -= 1;
            net_bytes -= key.size as i64;
        }
        self.mark_freed(block, kind);
        if pages_mode {
            self.pages_note_idle(block);
        } else {
            if self.is_split(block) {
                net_blocks += 1;
                net_bytes += self.blocks[block as usize].size() as i64;
            }
            apply_net(&mut self.stats.inactive_split, kind, net_blocks);
            apply_net(&mut self.stats.inactive_split_bytes, kind, net_bytes);
            if !self.is_split(block) {
                let segment = self.blocks[block as usize].segment;
                let record = &mut self.segments[segment as usize];
                record.idle_since = self.clock;
                record.last_use = freed_size;
                self.idle_segments.push_back(segment);
            }
        }
        block
    }

    /// Records when a block became free, for garbage collection's ages.
    #[inline]
    pub(super) fn mark_freed(&mut self, block: u32, kind: SegmentKind) {
        if self.gc_active() {
            self.cold[block as usize].gc_base = self.search_count[kind.index()];
        }
    }

    /// Folds `block`'s next neighbour into `block` and frees the neighbour's record.
    pub(super) fn absorb_next(&mut self, block: u32) {
        let next = self.links.next(block);
        let next_next = self.links.next(next);
        let merged = self.blocks[block as usize].size() + self.blocks[next as usize].size();
        self.blocks[block as usize].set_size(merged);
        self.links.set_next(block, next_next);
        if next_next != NONE {
            self.links.set_prev(next_next, block);
        }
        self.free_block_record(next);
    }

    /// A free, unlinked record for the block at `offset` of the segment `of`.
    pub fn new_block_record(&mut self, of: SegmentFields, offset: u64, size: u64) -> u32 {
        debug_assert!(offset % MIN_BLOCK_SIZE == 0 && offset + size <= MAX_SEGMENT_SIZE);
        let SegmentFields {
            segment,
            base,
            stream,
            kind,
        } = of;
        let record = |serial| BlockRecord {
            base,
            requested: 0,
            granules: (size >> 9) as u32,
            offset_granules: (offset >> 9) as u32,
            serial,
            segment,
            stream,
            kind,
            in_use: true,
        };
        if let Some(index) = self.free_block_slots.pop() {
            let serial = self.blocks[index as usize].serial.wrapping_add(1);
            self.blocks[index as usize] = record(serial);
            self.links.reset(index);
            // `cold` keeps its stale value: it is read only for free blocks, and every free
            // block was marked by `mark_freed`, which writes it whenever garbage collection
            // is active (for the engine's whole life, or never).
            index
        } else {
            self.blocks.push(record(0));
            self.links.push();
            self.cold.push(BlockCold::default());
            (self.blocks.len() - 1) as u32
        }
    }

    pub fn free_block_record(&mut self, block: u32) {
        self.blocks[block as usize].in_use = false;
        self.links.reset(block);
        self.free_block_slots.push(block);
    }
}

fn apply_net(stat: &mut StatArray, kind: SegmentKind, net: i64) {
    if net > 0 {
        stat.increase(kind, net as u64);
    } else if net < 0 {
        stat.decrease(kind, (-net) as u64);
    }
}
