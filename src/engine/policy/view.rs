//! What a policy sees of the engine, and what it may ask of it.
//!
//! - [`StateView`]: a read-only window on the layout, the configuration and the statistics
//!   the placement rules read. `candidate` gets nothing else.
//! - [`Growth`]: the engine paths `grow` may run (reserve a range, map pages, create a
//!   segment down the retry chain, release a cached segment, recycle idle pages, take a
//!   free block out of the index, count a retry, describe an out-of-memory). Each is a
//!   method of the engine that keeps the layout's invariants; a policy reads through
//!   [`Growth::view`] and writes no field of [`EngineState`] itself.
//!
//! Both wrap a reference whose field is private to this module, so the policies, though
//! inside the engine, reach the state only through these methods.

use crate::config::Config;
use crate::engine::error::{AllocError, OomCause};
use crate::engine::free_index::{FreeIndex, FreeKey};
use crate::engine::idle::IdleSegment;
use crate::engine::pages::Recycled;
use crate::engine::rounding::SegmentKind;
use crate::engine::segments::NoSegment;
use crate::engine::source::{SegmentSource, SourceError};
use crate::engine::state::EngineState;

use super::Request;

/// A read-only window on the engine's state for the placement rules.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StateView<'a> {
    state: &'a EngineState,
}

impl<'a> StateView<'a> {
    /// The window on `state`.
    #[inline]
    pub fn new(state: &'a EngineState) -> StateView<'a> {
        StateView { state }
    }

    /// The engine's configuration.
    #[inline]
    pub fn config(self) -> &'a Config {
        &self.state.config
    }

    /// The cap on physical memory, if any.
    #[inline]
    pub fn cap(self) -> Option<u64> {
        self.state.cap
    }

    /// The largest segment (or range) the source can create.
    #[inline]
    pub fn max_segment_size(self) -> u64 {
        self.state.max_segment_size
    }

    /// The free blocks of `kind`, best fit by (stream, size, address).
    #[inline]
    pub fn free_blocks(self, kind: SegmentKind) -> &'a FreeIndex {
        &self.state.free_index[kind.index()]
    }

    /// A block's size.
    #[inline]
    pub fn block_size(self, block: u32) -> u64 {
        self.state.blocks[block as usize].size()
    }

    /// Whether a block record is in use, and of `kind`.
    #[inline]
    pub fn is_block_of(self, block: u32, kind: SegmentKind) -> bool {
        let record = &self.state.blocks[block as usize];
        record.in_use && record.kind == kind
    }

    /// The block after `block` in its segment, or `NONE`.
    #[inline]
    pub fn next(self, block: u32) -> u32 {
        self.state.links.next(block)
    }

    /// The block before `block` in its segment, or `NONE`.
    #[inline]
    pub fn prev(self, block: u32) -> u32 {
        self.state.links.prev(block)
    }

    /// Whether `block` is allocated.
    #[inline]
    pub fn is_allocated(self, block: u32) -> bool {
        self.state.links.is_allocated(block)
    }

    /// Whether `block` is unmapped.
    #[inline]
    pub fn is_unmapped(self, block: u32) -> bool {
        self.state.links.is_unmapped(block)
    }

    /// Whether `block` is a real block (not `NONE`) and unmapped.
    #[inline]
    pub fn is_unmapped_block(self, block: u32) -> bool {
        self.state.links.is_unmapped_block(block)
    }

    /// Whether `block` is a real block (not `NONE`), free and mapped.
    #[inline]
    pub fn is_free_block(self, block: u32) -> bool {
        self.state.links.is_free_block(block)
    }

    /// Whether a block shares its segment with other blocks.
    #[inline]
    pub fn is_split(self, block: u32) -> bool {
        self.state.is_split(block)
    }

    /// The oversize rules of `max_split_size_mb` for a block of `block_size` bytes and a
    /// request of `rounded` bytes.
    #[inline]
    pub fn passes_oversize_rules(self, block_size: u64, rounded: u64) -> bool {
        self.state.passes_oversize_rules(block_size, rounded)
    }

    /// The free-index key of a free block.
    #[inline]
    pub fn free_block_key(self, block: u32) -> FreeKey {
        self.state.key_of(block)
    }

    /// The free blocks that span a whole segment (the idle segments, kept with fixed
    /// segments only), least recently idle first.
    pub fn idle_segment_blocks(self) -> impl Iterator<Item = IdleSegment> + 'a {
        self.state.idle_segment_blocks()
    }

    /// The page size of a kind (1 with fixed segments).
    #[inline]
    pub fn page_of(self, kind: SegmentKind) -> u64 {
        self.state.page_of(kind)
    }

    /// The unmapped blocks of `kind` on `stream`, lowest address first.
    pub fn unmapped_by_address(
        self,
        kind: SegmentKind,
        stream: u32,
    ) -> impl Iterator<Item = u32> + 'a {
        self.state.unmapped_by_address(kind, stream)
    }

    /// The keys of unmapped blocks of `kind` on `stream` of at least `size` bytes, smallest
    /// first.
    pub fn unmapped_fits(
        self,
        kind: SegmentKind,
        stream: u32,
        size: u64,
    ) -> impl Iterator<Item = FreeKey> + 'a {
        self.state.unmapped_fits(kind, stream, size)
    }

    /// The keys of unmapped blocks of `kind` on `stream` smaller than `size`, largest first.
    pub fn unmapped_below(
        self,
        kind: SegmentKind,
        stream: u32,
        size: u64,
    ) -> impl Iterator<Item = FreeKey> + 'a {
        self.state.unmapped_below(kind, stream, size)
    }

    /// Bytes reserved now (in pages mode: mapped).
    #[inline]
    pub fn reserved(self) -> u64 {
        self.state.reserved()
    }

    /// Physical memory now: reserved plus spare.
    #[inline]
    pub fn physical(self) -> u64 {
        self.state.physical()
    }

    /// Spare bytes now: unmapped and kept by the source for reuse.
    #[inline]
    pub fn spare_bytes(self) -> u64 {
        self.state.pages.stats.spare_bytes
    }

    /// Bytes mapped over the engine's life.
    #[inline]
    pub fn mapped_total(self) -> u64 {
        self.state.pages.stats.mapped_total
    }

    /// Bytes allocated now.
    #[inline]
    pub fn allocated_bytes(self) -> u64 {
        self.state.stats.allocated_bytes.all.current
    }

    /// Bytes requested by live blocks now.
    #[inline]
    pub fn requested_bytes(self) -> u64 {
        self.state.stats.requested_bytes.all.current
    }

    /// Peak of allocated bytes over the engine's life.
    #[inline]
    pub fn lifetime_allocated_peak(self) -> u64 {
        self.state.lifetime_allocated_peak
    }

    /// Peak of requested bytes over the engine's life.
    #[inline]
    pub fn lifetime_requested_peak(self) -> u64 {
        self.state.lifetime_requested_peak
    }

    /// Requested bytes of every allocation over the engine's life.
    #[inline]
    pub fn lifetime_requested_total(self) -> u64 {
        self.state.lifetime_requested_total
    }
}

/// The engine paths a policy's `grow` may run, and a view of the state between them.
#[derive(Debug)]
pub(crate) struct Growth<'a> {
    state: &'a mut EngineState,
}

impl<'a> Growth<'a> {
    /// The paths over `state`.
    #[inline]
    pub fn new(state: &'a mut EngineState) -> Growth<'a> {
        Growth { state }
    }

    /// What the state holds now.
    #[inline]
    pub fn view(&self) -> StateView<'_> {
        StateView::new(self.state)
    }

    /// Takes free block `block` out of the free index, to serve the request with it.
    pub fn take_free_block(&mut self, block: u32) -> u32 {
        let key = self.state.key_of(block);
        let kind = self.state.blocks[block as usize].kind;
        self.state.free_index[kind.index()].remove(&key);
        block
    }

    /// Counts one more pass down the retry chain (`num_alloc_retries`).
    #[inline]
    pub fn count_retry(&mut self) {
        self.state.stats.num_alloc_retries += 1;
    }

    /// The retry chain with new segments of `segment_size` bytes
    /// ([`EngineState::grow_segments`]); `make_room` runs before the first attempt.
    pub fn grow_segments(
        &mut self,
        request: Request,
        segment_size: u64,
        source: &mut dyn SegmentSource,
        make_room: &mut dyn FnMut(&mut Growth<'_>, u64, &mut dyn SegmentSource),
    ) -> Result<u32, AllocError> {
        self.state
            .grow_segments(request, segment_size, source, &mut |state, size, source| {
                make_room(&mut Growth::new(state), size, source)
            })
    }

    /// Releases the segment of cached block `block` (a whole idle segment).
    pub fn release_block(&mut self, block: u32, source: &mut dyn SegmentSource) {
        self.state.release_block(block, source)
    }

    /// Reserves a new range of `kind` on `stream` for at least `at_least` bytes.
    pub fn reserve_range(
        &mut self,
        kind: SegmentKind,
        stream: u32,
        at_least: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        self.state.reserve_range(kind, stream, at_least, source)
    }

    /// Maps the front of an unmapped block under the cap, for a request that takes it
    /// ([`EngineState::map_front_to_take`]).
    pub fn map_front_to_take(
        &mut self,
        block: u32,
        bytes: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        self.state.map_front_to_take(block, bytes, source)
    }

    /// Maps the front of an unmapped block with no cap check of its own
    /// ([`EngineState::map_front_uncapped`]).
    pub fn map_front_uncapped(
        &mut self,
        block: u32,
        bytes: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        self.state.map_front_uncapped(block, bytes, source)
    }

    /// Unmaps idle pages until `bytes` are spare ([`EngineState::recycle_idle`]).
    pub fn recycle_idle(
        &mut self,
        bytes: u64,
        keep: [u32; 2],
        near: Option<(SegmentKind, u32)>,
        source: &mut dyn SegmentSource,
    ) -> Result<Recycled, SourceError> {
        self.state.recycle_idle(bytes, keep, near, source)
    }

    /// Gives spare memory back to the source.
    pub fn release_spare(&mut self, source: &mut dyn SegmentSource) {
        self.state.release_spare(source)
    }

    /// Unmaps every idle page and frees it ([`EngineState::unmap_all_idle`]).
    pub fn unmap_all_idle(
        &mut self,
        batched: bool,
        source: &mut dyn SegmentSource,
    ) -> Result<(), SourceError> {
        self.state.unmap_all_idle(batched, source)
    }

    /// Counts an out-of-memory and describes it.
    pub fn out_of_memory(
        &mut self,
        request: Request,
        segment_size: u64,
        cause: OomCause,
    ) -> AllocError {
        self.state.out_of_memory(request, segment_size, cause)
    }
}
