//! Pages mode: address ranges reserved with no memory behind them, and memory mapped in
//! whole pages where blocks live.
//!
//! A range is a segment whose blocks are of three kinds: allocated (always on mapped pages),
//! free and mapped, and *unmapped* (address space only). Unmapped blocks start and end on
//! page borders, so every page lies wholly in mapped blocks or wholly in unmapped ones, and
//! the bytes mapped in a range are its size less its unmapped blocks. Free mapped blocks
//! merge only with free mapped neighbours and unmapped blocks only with unmapped ones.
//!
//! Statistics follow PyTorch's expandable segments: `reserved_bytes` counts mapped bytes,
//! each map counts in `num_device_alloc` and each unmap in `num_device_free`, ranges are not
//! `segment`s, and no block counts as `inactive_split`. Physical memory is what is mapped
//! plus spare memory (unmapped and kept by the source for the next map); the engine keeps
//! no spare memory between calls.

use std::collections::BTreeSet;
use std::ops::Range;

use super::free_index::FreeKey;
use super::links::NONE;
use super::page_layout::{UnmappedOrder, holds_page, round_up_to_page};
use super::rounding::SegmentKind;
use super::segments::NoSegment;
use super::size_order::SizeOrder;
use super::source::{SegmentSource, SourceError};
use super::state::EngineState;
use super::types::SegmentId;

/// What [`EngineState::recycle_idle`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recycled {
    /// Bytes unmapped, now spare.
    pub bytes: u64,
    /// Whether any were pages of blocks of the kind and stream the caller named. Where none
    /// were, the blocks of that kind on that stream (free, allocated and unmapped), their
    /// neighbours and their indexes are as they were: ranges hold blocks of one kind and
    /// stream, and unmapping changes only the range it unmaps in.
    pub near: bool,
}

impl EngineState {
    /// The page size of a kind.
    #[inline]
    pub fn page_of(&self, kind: SegmentKind) -> u64 {
        self.pages.page[kind.index()]
    }

    /// Physical memory now: mapped plus spare.
    pub fn physical(&self) -> u64 {
        self.reserved() + self.pages.stats.spare_bytes
    }

    /// Lists a free mapped block among the idle pages if it holds a whole page, as the most
    /// recently freed. The block is not listed: it was allocated or unmapped until now, or
    /// a neighbour that the merge took off the list.
    #[inline(always)]
    pub(super) fn pages_note_idle(&mut self, block: u32) {
        let b = &self.blocks[block as usize];
        let page = self.page_of(b.kind);
        debug_assert!(
            !self.pages.idle_pages.contains(block),
            "{block} listed twice"
        );
        if holds_page(b.offset(), b.size(), page) {
            self.pages.idle_pages.push_back(block);
        }
    }

    /// After `block` of `kind` was split for a request and `remainder` (`offset..offset +
    /// size` of the segment) cut from it: the remainder takes the block's place among idle
    /// pages if it holds a page; the block leaves.
    #[inline]
    pub(super) fn pages_hand_over(
        &mut self,
        block: u32,
        remainder: u32,
        kind: SegmentKind,
        (offset, size): (u64, u64),
    ) {
        let page = self.page_of(kind);
        self.pages
            .idle_pages
            .hand_over(block, remainder, || holds_page(offset, size, page));
    }

    fn index_unmapped(&mut self, block: u32) {
        let key = self.key_of(block);
        let kind = self.blocks[block as usize].kind.index();
        match self.pages.order {
            UnmappedOrder::Size => {
                let inserted = self.pages.unmapped_by_size[kind].insert(key);
                debug_assert!(inserted, "unmapped block {block} indexed twice");
            }
            UnmappedOrder::Address => {
                self.pages.unmapped_by_address[kind].insert((key.stream, key.address, block));
            }
        }
    }

    fn unindex_unmapped(&mut self, block: u32) {
        let key = self.key_of(block);
        let kind = self.blocks[block as usize].kind.index();
        match self.pages.order {
            UnmappedOrder::Size => {
                let removed = self.pages.unmapped_by_size[kind].remove(&key);
                debug_assert!(removed, "unmapped block {block} was not indexed");
            }
            UnmappedOrder::Address => {
                let removed =
                    self.pages.unmapped_by_address[kind].remove(&(key.stream, key.address, block));
                debug_assert!(removed, "unmapped block {block} was not indexed");
            }
        }
    }

    /// Indexes unmapped block `block` in place of the one indexed as `old` (cut, absorbed,
    /// or no longer unmapped): in size order, one search where the order keeps its place.
    fn index_unmapped_in_place_of(&mut self, old: &FreeKey, block: u32) {
        let key = self.key_of(block);
        let kind = self.blocks[block as usize].kind.index();
        match self.pages.order {
            UnmappedOrder::Size => {
                let replaced = self.pages.unmapped_by_size[kind].replace(old, key);
                debug_assert!(replaced, "unmapped block {} was not indexed", old.block);
            }
            UnmappedOrder::Address => {
                let index = &mut self.pages.unmapped_by_address[kind];
                let removed = index.remove(&(old.stream, old.address, old.block));
                debug_assert!(removed, "unmapped block {} was not indexed", old.block);
                index.insert((key.stream, key.address, block));
            }
        }
    }

    /// Every unmapped block of the kept index.
    pub(super) fn unmapped_blocks(&self) -> Vec<u32> {
        match self.pages.order {
            UnmappedOrder::Size => self
                .pages
                .unmapped_by_size
                .iter()
                .flat_map(|set| set.iter().map(|key| key.block))
                .collect(),
            UnmappedOrder::Address => self
                .pages
                .unmapped_by_address
                .iter()
                .flat_map(|set| set.iter().map(|&(_, _, b)| b))
                .collect(),
        }
    }

    /// Cuts `block` in two at `offset` bytes into it; the upper part is a new record in the
    /// same state, linked after it. Returns the upper part.
    pub(super) fn cut(&mut self, block: u32, at: u64) -> u32 {
        let b = &self.blocks[block as usize];
        debug_assert!(at > 0 && at < b.size());
        let (of, offset, size) = (b.segment_fields(), b.offset(), b.size());
        let upper = self.new_block_record(of, offset + at, size - at);
        let next = self.links.next(block);
        self.links.set_prev(upper, block);
        self.links.set_next(upper, next);
        if next != NONE {
            self.links.set_prev(next, upper);
        }
        self.links.set_next(block, upper);
        self.blocks[block as usize].set_size(at);
        upper
    }

    /// Reserves a new range of `kind` on `stream`, large enough for `at_least` bytes, as one
    /// unmapped block; returns the block.
    pub fn reserve_range(
        &mut self,
        kind: SegmentKind,
        stream: u32,
        at_least: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let Some(layout) = self.pages.layout else {
            return Err(NoSegment::Source(SourceError::other("not in pages mode")));
        };
        let page = layout.page[kind.index()];
        let max_range = layout.max_range[kind.index()];
        let needed = at_least.div_ceil(page).saturating_mul(page).min(max_range);
        let usual = layout.range_size[kind.index()].max(needed).min(max_range);
        let slot = self.take_segment_slot();
        // Address space is shared with other pools: where a range of the usual size no
        // longer fits, one of just the request's size may.
        let mut size = usual;
        let mut reserved = source.reserve_range(SegmentId(slot), size, kind);
        if let Err(error) = &reserved
            && error.is_out_of_memory()
            && needed < usual
        {
            size = needed;
            reserved = source.reserve_range(SegmentId(slot), size, kind);
        }
        if let Err(error) = reserved {
            self.free_segment_slots.push(slot);
            return Err(NoSegment::Source(error));
        }
        let head = self.install_segment(slot, size, kind, stream, source);
        self.links.set_unmapped(head, true);
        self.index_unmapped(head);
        self.pages.stats.ranges += 1;
        self.pages.stats.range_bytes += size;
        Ok(head)
    }

    /// Gives back a range that is one unmapped block, `block`.
    fn release_range(&mut self, block: u32, source: &mut dyn SegmentSource) {
        debug_assert!(self.links.is_unmapped(block) && !self.is_split(block));
        self.unindex_unmapped(block);
        let segment = self.blocks[block as usize].segment;
        let size = self.segments[segment as usize].size;
        self.free_block_record(block);
        self.segments[segment as usize].in_use = false;
        self.free_segment_slots.push(segment);
        source.release_range(SegmentId(segment), size);
        self.pages.stats.ranges -= 1;
        self.pages.stats.range_bytes -= size;
    }

    /// Maps the first `bytes` (whole pages) of unmapped block `block`, in one bind, for a
    /// request that takes the result at once: the mapped part becomes a free block, merged
    /// with free neighbours and listed among idle pages as any freed block is, but left out
    /// of the free index (the caller takes it, so indexing it would be undone at once). It
    /// is returned. Fails, changing nothing, when the cap or the source refuses.
    pub fn map_front_to_take(
        &mut self,
        block: u32,
        bytes: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let prev = self.links.prev(block);
        if bytes < self.blocks[block as usize].size() && self.links.is_free_block(prev) {
            // The common case of compact placement: the mapped pages extend the free block
            // below. Moving the border between the two blocks leaves the layout, the indexes
            // and the idle pages as cutting and merging would, with no record made or freed.
            self.map_checked(block, bytes, true, source)?;
            return Ok(self.extend_into_unmapped(prev, block, bytes));
        }
        self.map_front_checked(block, bytes, true, source)?;
        Ok(self.merge_free_block_unindexed(block))
    }

    /// Moves the first `bytes` of unmapped block `unmapped` (now mapped, fewer than its
    /// size) into `free`, the free mapped block before it, which leaves the free index and
    /// is listed among idle pages as the most recently freed, as a merge would. Returns
    /// `free`.
    fn extend_into_unmapped(&mut self, free: u32, unmapped: u32, bytes: u64) -> u32 {
        debug_assert_eq!(self.links.next(free), unmapped);
        let kind = self.blocks[free as usize].kind;
        let free_key = self.key_of(free);
        self.free_index[kind.index()].remove(&free_key);
        self.pages.idle_pages.remove(free);
        let old = self.key_of(unmapped);
        self.blocks[free as usize].set_size(free_key.size + bytes);
        let u = &mut self.blocks[unmapped as usize];
        u.set_offset(u.offset() + bytes);
        u.set_size(old.size - bytes);
        self.index_unmapped_in_place_of(&old, unmapped);
        self.mark_freed(free, kind);
        self.pages_note_idle(free);
        free
    }

    /// Maps the first `bytes` (whole pages) of unmapped block `block`, in one bind, with
    /// no cap check of its own: for a caller that checked the cap before, as PyTorch's
    /// `alloc_block` does once per request (with the segment size the request would get, not
    /// the pages mapped), its `map_block` checking nothing. Physical memory may then end
    /// above the cap by less than one page of the kind. The mapped part becomes a free
    /// block, merged with free neighbours and indexed; it is returned. Fails, changing
    /// nothing, when the source refuses.
    pub fn map_front_uncapped(
        &mut self,
        block: u32,
        bytes: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        self.map_front_checked(block, bytes, false, source)?;
        Ok(self.merge_free_block(block))
    }

    /// Maps the first `bytes` of `block` and records it in the layout as a free block not
    /// yet merged with its neighbours.
    fn map_front_checked(
        &mut self,
        block: u32,
        bytes: u64,
        check_cap: bool,
        source: &mut dyn SegmentSource,
    ) -> Result<(), NoSegment> {
        self.map_checked(block, bytes, check_cap, source)?;
        let size = self.blocks[block as usize].size();
        if bytes < size {
            let whole = self.key_of(block);
            let rest = self.cut(block, bytes);
            self.links.set_unmapped(rest, true);
            self.index_unmapped_in_place_of(&whole, rest);
        } else {
            self.unindex_unmapped(block);
        }
        self.links.set_unmapped(block, false);
        Ok(())
    }

    /// Maps the first `bytes` of unmapped block `block` through the source, in one bind,
    /// after the cap check if `check_cap`, and counts them; the layout is the caller's to
    /// change. Fails, changing nothing, when the cap or the source refuses.
    fn map_checked(
        &mut self,
        block: u32,
        bytes: u64,
        check_cap: bool,
        source: &mut dyn SegmentSource,
    ) -> Result<(), NoSegment> {
        let (kind, offset, size, segment) = {
            let b = &self.blocks[block as usize];
            (b.kind, b.offset(), b.size(), b.segment)
        };
        debug_assert!(self.links.is_unmapped(block));
        debug_assert!(bytes > 0 && bytes <= size && bytes % self.page_of(kind) == 0);
        let spare = self.pages.stats.spare_bytes;
        let new_memory = bytes - bytes.min(spare);
        if check_cap
            && self
                .cap
                .is_some_and(|cap| self.physical().saturating_add(new_memory) > cap)
        {
            return Err(NoSegment::Cap);
        }
        let run = offset..offset + bytes;
        source
            .map_pages(SegmentId(segment), std::slice::from_ref(&run))
            .map_err(NoSegment::Source)?;
        let stats = &mut self.pages.stats;
        stats.spare_bytes -= bytes.min(spare);
        stats.mapped_total += bytes;
        stats.bind_calls += 1;
        self.stats.reserved_bytes.increase(kind, bytes);
        self.stats.num_device_alloc += 1;
        self.note_physical();
        Ok(())
    }

    /// The whole pages of free mapped block `block` to unmap: up to `max_bytes` (rounded up
    /// to pages) of them, the highest first; `None` if it holds no whole page.
    fn plan_unmap(&self, block: u32, max_bytes: u64) -> Option<Range<u64>> {
        let b = &self.blocks[block as usize];
        let (offset, size) = (b.offset(), b.size());
        let page = self.page_of(b.kind);
        let low = round_up_to_page(offset, page);
        let high = (offset + size) / page * page;
        if low >= high || max_bytes == 0 {
            return None;
        }
        let take = (high - low).min(max_bytes.div_ceil(page).saturating_mul(page));
        Some(high - take..high)
    }

    /// Records in the layout that the source unmapped `run` of free block `block`: the run
    /// becomes unmapped (merged with unmapped neighbours), the rest stays free and mapped.
    fn apply_unmap(&mut self, block: u32, run: Range<u64>) {
        let (kind, offset, size) = {
            let b = &self.blocks[block as usize];
            (b.kind, b.offset(), b.size())
        };
        debug_assert!(self.links.is_free_block(block));
        let page = self.page_of(kind);
        let key = self.key_of(block);
        self.free_index[kind.index()].remove(&key);
        let listed = self.pages.idle_pages.contains(block);
        let next = self.links.next(block);
        if run.start > offset && run.end == offset + size && self.links.is_unmapped_block(next) {
            // The top pages of the block join the unmapped block after it: moving the border
            // between the two leaves the layout, the indexes and the idle pages as cutting
            // and merging would, with no record made or freed.
            self.blocks[block as usize].set_size(run.start - offset);
            let old = self.key_of(next);
            let n = &mut self.blocks[next as usize];
            n.set_offset(run.start);
            n.set_size(old.size + (run.end - run.start));
            self.index_unmapped_in_place_of(&old, next);
            let key = self.key_of(block);
            self.free_index[kind.index()].insert(key);
            if listed && !holds_page(offset, run.start - offset, page) {
                self.pages.idle_pages.remove(block);
            }
            self.count_unmapped(kind, run.end - run.start);
            return;
        }
        let mut middle = block;
        let mut head = None;
        if run.start > offset {
            middle = self.cut(block, run.start - offset);
            head = Some(block);
        }
        if run.end < offset + size {
            let tail = self.cut(middle, run.end - run.start);
            self.mark_freed(tail, kind);
            let key = self.key_of(tail);
            self.free_index[kind.index()].insert(key);
        }
        match head {
            Some(head) => {
                let key = self.key_of(head);
                self.free_index[kind.index()].insert(key);
                let h = &self.blocks[head as usize];
                if listed && !holds_page(h.offset(), h.size(), page) {
                    self.pages.idle_pages.remove(head);
                }
            }
            None => {
                self.pages.idle_pages.remove(block);
            }
        }
        self.links.set_unmapped(middle, true);
        self.merge_unmapped(middle);
        self.count_unmapped(kind, run.end - run.start);
    }

    /// Counts `bytes` of `kind` unmapped: spare now.
    fn count_unmapped(&mut self, kind: SegmentKind, bytes: u64) {
        let stats = &mut self.pages.stats;
        stats.spare_bytes += bytes;
        stats.unmapped_total += bytes;
        self.stats.reserved_bytes.decrease(kind, bytes);
    }

    /// Releases range `segment` if no page of it is mapped any more.
    pub(super) fn release_if_empty(&mut self, segment: u32, source: &mut dyn SegmentSource) {
        let s = &self.segments[segment as usize];
        if s.in_use && self.links.is_unmapped(s.head) && !self.is_split(s.head) {
            self.release_range(s.head, source);
        }
    }

    /// Unmaps whole pages of free mapped block `block`: up to `max_bytes` (rounded up to
    /// pages) of them, the highest first, in one bind. The unmapped part merges with
    /// unmapped neighbours; a range left wholly unmapped is released. Returns the bytes
    /// unmapped, now spare.
    ///
    /// # Errors
    ///
    /// The source's refusal; the block is then unchanged.
    pub fn unmap_pages_of(
        &mut self,
        block: u32,
        max_bytes: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u64, SourceError> {
        self.unmap_batch(&[(block, max_bytes)], source)
    }

    /// Unmaps whole pages of several free mapped blocks (each with its byte limit), with one
    /// bind per range. Returns the bytes unmapped, now spare.
    ///
    /// # Errors
    ///
    /// The source's refusal; the blocks of that range are then unchanged.
    pub fn unmap_batch(
        &mut self,
        blocks: &[(u32, u64)],
        source: &mut dyn SegmentSource,
    ) -> Result<u64, SourceError> {
        let mut plans = std::mem::take(&mut self.pages.scratch_plans);
        plans.clear();
        plans.extend(
            blocks
                .iter()
                .filter_map(|&(block, max)| self.plan_with_segment(block, max)),
        );
        self.unmap_plans(plans, source)
    }

    /// [`Self::plan_unmap`] with the block's segment: (segment, block, run).
    fn plan_with_segment(&self, block: u32, max_bytes: u64) -> Option<(u32, u32, Range<u64>)> {
        let run = self.plan_unmap(block, max_bytes)?;
        Some((self.blocks[block as usize].segment, block, run))
    }

    /// Unmaps planned runs (from [`Self::plan_with_segment`]), with one bind per range, and
    /// keeps `plans`'s buffer for the next batch. Returns the bytes unmapped, now spare.
    fn unmap_plans(
        &mut self,
        mut plans: Vec<(u32, u32, Range<u64>)>,
        source: &mut dyn SegmentSource,
    ) -> Result<u64, SourceError> {
        let mut runs = std::mem::take(&mut self.pages.scratch_runs);
        plans.sort_unstable_by_key(|(segment, _, run)| (*segment, run.start));
        let mut result = Ok(0);
        for group in plans.chunk_by(|a, b| a.0 == b.0) {
            let segment = group[0].0;
            runs.clear();
            runs.extend(group.iter().map(|(_, _, run)| run.clone()));
            if let Err(error) = source.unmap_pages(SegmentId(segment), &runs) {
                result = Err(error);
                break;
            }
            for (_, block, run) in group {
                if let Ok(unmapped) = &mut result {
                    *unmapped += run.end - run.start;
                }
                self.apply_unmap(*block, run.clone());
            }
            self.pages.stats.bind_calls += 1;
            self.stats.num_device_free += 1;
            self.release_if_empty(segment, source);
        }
        plans.clear();
        runs.clear();
        self.pages.scratch_plans = plans;
        self.pages.scratch_runs = runs;
        result
    }

    /// Merges unmapped block `block` with unmapped neighbours and indexes the result.
    pub(super) fn merge_unmapped(&mut self, block: u32) -> u32 {
        let prev = self.links.prev(block);
        let next = self.links.next(block);
        let with_prev = self.links.is_unmapped_block(prev);
        let with_next = self.links.is_unmapped_block(next);
        // The merged block takes the index entry of the first neighbour it absorbs.
        let (merged, taken) = match (with_prev, with_next) {
            (true, _) => (prev, Some(self.key_of(prev))),
            (false, true) => (block, Some(self.key_of(next))),
            (false, false) => (block, None),
        };
        if with_prev {
            if with_next {
                self.unindex_unmapped(next);
            }
            self.absorb_next(prev);
        }
        if with_next {
            self.absorb_next(merged);
        }
        match taken {
            Some(old) => self.index_unmapped_in_place_of(&old, merged),
            None => self.index_unmapped(merged),
        }
        merged
    }

    /// Gives spare memory back to the device.
    pub fn release_spare(&mut self, source: &mut dyn SegmentSource) {
        let spare = self.pages.stats.spare_bytes;
        if spare > 0 {
            source.release_spare(spare);
            self.pages.stats.spare_bytes = 0;
        }
    }

    /// Records the physical peak.
    pub(super) fn note_physical(&mut self) {
        let physical = self.physical();
        let stats = &mut self.pages.stats;
        stats.physical_peak = stats.physical_peak.max(physical);
    }

    /// Unmaps every whole page of every free mapped block, releases the ranges left wholly
    /// unmapped and gives the memory back (`empty_cache`, and the last step of the retry
    /// chain). Blocks go in PyTorch's order: large kind, then small, each by (stream, size,
    /// address); `batched` unmaps each range's pages in one bind, else each block's in one
    /// (as PyTorch's `unmap_block` does, counted in `num_device_free`). Like PyTorch's
    /// `release_cached_blocks`, it first synchronizes every stream: one
    /// `num_sync_all_streams`.
    pub fn unmap_all_idle(
        &mut self,
        batched: bool,
        source: &mut dyn SegmentSource,
    ) -> Result<(), SourceError> {
        self.stats.num_sync_all_streams += 1;
        let free: Vec<(u32, u64)> = [SegmentKind::Large, SegmentKind::Small]
            .iter()
            .flat_map(|kind| self.free_index[kind.index()].iter())
            .map(|k| (k.block, u64::MAX))
            .collect();
        let result = if batched {
            self.unmap_batch(&free, source).map(|_| ())
        } else {
            free.iter()
                .try_for_each(|&(block, max)| self.unmap_pages_of(block, max, source).map(|_| ()))
        };
        // Ranges reserved for a mapping that then failed hold no page either.
        for segment in 0..self.segments.len() as u32 {
            self.release_if_empty(segment, source);
        }
        self.release_spare(source);
        result
    }

    /// Unmaps idle pages, least recently freed first, until `bytes` are spare or no idle
    /// page is left; pages of the blocks in `keep` stay. Returns the bytes unmapped, and
    /// whether any were pages of blocks of kind and stream `near` (see [`Recycled`]).
    pub fn recycle_idle(
        &mut self,
        bytes: u64,
        keep: [u32; 2],
        near: Option<(SegmentKind, u32)>,
        source: &mut dyn SegmentSource,
    ) -> Result<Recycled, SourceError> {
        let mut planned = 0;
        let mut plans = std::mem::take(&mut self.pages.scratch_plans);
        plans.clear();
        self.pages.idle_pages.tidy();
        self.pages.idle_pages.skip_stale_front();
        for block in self.pages.idle_pages.iter() {
            if planned >= bytes {
                break;
            }
            if keep.contains(&block) {
                continue;
            }
            if let Some(plan) = self.plan_with_segment(block, bytes - planned) {
                planned += plan.2.end - plan.2.start;
                plans.push(plan);
            }
        }
        let near = near.is_some_and(|(kind, stream)| {
            plans.iter().any(|&(_, block, _)| {
                let b = &self.blocks[block as usize];
                b.kind == kind && b.stream == stream
            })
        });
        let bytes = self.unmap_plans(plans, source)?;
        Ok(Recycled { bytes, near })
    }

    /// The unmapped blocks of `kind` on `stream`, lowest address first (kept only in
    /// [`UnmappedOrder::Address`]).
    pub fn unmapped_by_address(
        &self,
        kind: SegmentKind,
        stream: u32,
    ) -> impl Iterator<Item = u32> + '_ {
        debug_assert_eq!(self.pages.order, UnmappedOrder::Address);
        self.pages.unmapped_by_address[kind.index()]
            .range((stream, 0, 0)..)
            .take_while(move |&&(s, _, _)| s == stream)
            .map(|&(_, _, block)| block)
    }

    /// The free-index key of unmapped blocks of `kind` on `stream` of at least `size` bytes,
    /// smallest first (kept only in [`UnmappedOrder::Size`], as is [`Self::unmapped_below`]).
    pub fn unmapped_fits(
        &self,
        kind: SegmentKind,
        stream: u32,
        size: u64,
    ) -> impl Iterator<Item = FreeKey> + '_ {
        debug_assert_eq!(self.pages.order, UnmappedOrder::Size);
        self.pages.unmapped_by_size[kind.index()].fits_ascending(stream, size)
    }

    /// Unmapped blocks of `kind` on `stream` smaller than `size`, largest first.
    pub fn unmapped_below(
        &self,
        kind: SegmentKind,
        stream: u32,
        size: u64,
    ) -> impl Iterator<Item = FreeKey> + '_ {
        self.pages.unmapped_by_size[kind.index()].below_descending(stream, size)
    }

    /// Rebuilds the unmapped indexes after the ranges' addresses changed.
    pub(super) fn reindex_unmapped(&mut self) {
        let blocks = self.unmapped_blocks();
        self.pages.unmapped_by_size = [SizeOrder::default(), SizeOrder::default()];
        self.pages.unmapped_by_address = [BTreeSet::new(), BTreeSet::new()];
        for block in blocks {
            self.index_unmapped(block);
        }
    }
}
