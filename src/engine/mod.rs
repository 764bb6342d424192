//! The placement engine: decides which segment and offset serve each request.
//!
//! It knows nothing of wgpu. It manages abstract segments (an id and a size) obtained from a
//! [`SegmentSource`], carves them into blocks, and hands out [`Allocation`]s of
//! (segment, offset, size). Trace replay, property tests and the fragmentation benchmark run
//! it with [`VirtualSegments`]; the wgpu pool runs it over real buffers.
//!
//! Guarantees, under any sequence of calls:
//! - live blocks never overlap, and each lies inside its segment;
//! - every offset and size is a multiple of 512 B;
//! - [`Engine::memory_stats`] equals a recount from the blocks and segments
//!   ([`Engine::check_invariants`]);
//! - a failed call (out-of-memory, bad request, stale free) leaves every live block as it was.
//!
//! Files, one concern each: [`types`](SegmentId) (public value types), `records` (packed
//! block and segment records), `state` (the layout the policies read), `split_merge`,
//! `segments` (creation, release, virtual addresses), `release` (the retry chain), `policy`
//! (one file per placement policy, behind one trait), `preload` (the engine's only `unsafe`:
//! a CPU cache hint), `check` (snapshots and the recount), `mode` (the memory mode, decided
//! once), `source` (the [`SegmentSource`] trait) and `simulated` ([`VirtualSegments`]),
//! `page_layout` (pages mode's sizes and state) and `pages` (ranges mapped and unmapped),
//! `evict` (pages mode: allocated blocks whose interior pages are unmapped), `idle` (the
//! idle segments) and `idle_queue` (pages mode's idle pages), `stats` and `summary`.
//!
//! ```
//! use wgpool::config::Config;
//! use wgpool::engine::{Engine, EngineLimits, VirtualSegments};
//!
//! let mut engine = Engine::new(Config::default(), EngineLimits::unlimited()).unwrap();
//! let mut device = VirtualSegments::unlimited();
//! let a = engine.allocate(1000, 0, &mut device).unwrap();
//! assert_eq!(a.block_size, 1024); // rounded to 512 B
//! assert_eq!(engine.memory_stats().reserved_bytes.all.current, 2 << 20); // one small segment
//! engine.free(a.block, &mut device).unwrap();
//! engine.empty_cache(&mut device);
//! assert_eq!(engine.memory_stats().reserved_bytes.all.current, 0);
//! ```

#![deny(unsafe_code)]

mod check;
mod cuda_addresses;
mod error;
mod evict;
pub(crate) mod free_index;
mod idle;
mod idle_queue;
mod invariant_error;
mod links;
mod mapped_runs;
mod mode;
mod page_layout;
mod pages;
mod policy;
mod preload;
mod records;
mod release;
pub mod rounding;
mod segments;
mod simulated;
mod size_order;
mod sorted_set;
mod source;
mod split_merge;
mod state;
pub mod stats;
mod summary;
#[cfg(test)]
mod test_rng;
mod types;

pub use check::{BlockSnapshot, SegmentSnapshot};
pub use cuda_addresses::CudaAddressModel;
pub use error::{
    AllocError, EngineError, FreeError, OomCause, OutOfMemory, RoomShortfall, SizeLimit,
};
pub use evict::EvictError;
pub use invariant_error::InvariantError;
pub use page_layout::PageStats;
pub use rounding::SegmentKind;
pub use simulated::VirtualSegments;
pub use source::{PageMapping, SegmentSource, SourceError, SourceErrorKind};
pub use stats::{MemoryStats, Stat, StatArray};
pub use types::{Allocation, BlockId, EngineLimits, MAX_SEGMENT_SIZE, MemoryMode, SegmentId};

use crate::config::{Config, Policy};
pub(crate) use mode::decide_memory_mode;
use page_layout::{PageLayout, PageState, UnmappedOrder};
use policy::{Growth, PlacementPolicy, Request, StateView};
use preload::preload_record;
use rounding::round_request;
use rounding::{SMALL_SEGMENT_SIZE, segment_size_for};
use state::EngineState;

/// The placement engine. See the [module documentation](self).
#[derive(Debug)]
pub struct Engine {
    state: EngineState,
    policy: Box<dyn PlacementPolicy>,
}

impl Engine {
    /// Creates an engine with no segments.
    ///
    /// # Errors
    ///
    /// [`EngineError::Config`] when the configuration holds a value out of the engine's
    /// range (possible only for a `Config` changed after parsing), and [`EngineError::Cap`]
    /// when it cannot be applied to these limits: a `per_process_memory_fraction` with no
    /// known device size and no `memory_limit_mb`.
    ///
    /// The memory mode follows `expandable_segments`: pages where the limits say the source
    /// can map them (`auto`, `True`), fixed segments otherwise (`False`, or `auto` on a
    /// source that cannot; `backend:passthrough` always). [`EngineError::PagesUnavailable`]
    /// for `True` on a source that cannot.
    pub fn new(config: Config, limits: EngineLimits) -> Result<Engine, EngineError> {
        Engine::build(config, limits, None)
    }

    /// Creates an engine with no segments in `mode`, decided beforehand by
    /// [`decide_memory_mode`] from the same configuration and page mapping (the memory
    /// layer's plan), so that the engine and the memory behind it never disagree.
    ///
    /// # Errors
    ///
    /// As [`Engine::new`]; [`EngineError::PagesUnavailable`] for [`MemoryMode::Pages`]
    /// where `limits` carry no usable page mapping.
    pub(crate) fn with_mode(
        config: Config,
        limits: EngineLimits,
        mode: MemoryMode,
    ) -> Result<Engine, EngineError> {
        Engine::build(config, limits, Some(mode))
    }

    /// [`Engine::new`] (`mode` is `None`: decided here) and [`Engine::with_mode`].
    fn build(
        config: Config,
        limits: EngineLimits,
        mode: Option<MemoryMode>,
    ) -> Result<Engine, EngineError> {
        config.validate()?;
        let cap = config.memory_cap(limits.device_memory)?;
        let mode = match mode {
            Some(mode) => mode,
            None => decide_memory_mode(&config, limits.page_mapping)?,
        };
        let page_mapping = mode::usable_page_mapping(limits.page_mapping);
        if mode == MemoryMode::Pages && page_mapping.is_none() {
            return Err(EngineError::PagesUnavailable);
        }
        let pages_mode = mode == MemoryMode::Pages;
        let pages = match (pages_mode, page_mapping) {
            (true, Some(mapping)) => {
                // PyTorch maps 2 MiB pages for the small kind and pages of its large
                // segment (20 MiB) for the large one; the compact policy maps finer pages.
                let (small, large, order) = match config.policy {
                    Policy::Pytorch => (
                        SMALL_SEGMENT_SIZE,
                        segment_size_for(&config, rounding::SMALL_SIZE + 1),
                        UnmappedOrder::Address,
                    ),
                    Policy::Compact => {
                        let (small, large) = policy::COMPACT_PAGES;
                        (small, large, UnmappedOrder::Size)
                    }
                };
                let layout = PageLayout::new(mapping, small, large, limits.device_memory);
                Some(PageState::new(layout, order))
            }
            _ => None,
        };
        let range = pages
            .as_ref()
            .and_then(|p| p.layout)
            .map_or(u64::MAX, |l| l.max_range[0].min(l.max_range[1]));
        let max_segment_size = limits.max_segment_size.min(range);
        let size_limit = if range < limits.max_segment_size.min(MAX_SEGMENT_SIZE) {
            SizeLimit::Range
        } else if limits.max_segment_size < MAX_SEGMENT_SIZE {
            SizeLimit::Source
        } else {
            SizeLimit::Engine
        };
        let policy = policy::for_config(&config, pages_mode);
        let mut state = EngineState::new(config, cap, max_segment_size, pages);
        state.size_limit = size_limit;
        Ok(Engine { state, policy })
    }

    /// Whether the engine maps pages or creates fixed segments.
    pub fn memory_mode(&self) -> MemoryMode {
        if self.state.pages_mode {
            MemoryMode::Pages
        } else {
            MemoryMode::Segments
        }
    }

    /// The page the engine maps for blocks of `kind`, in pages mode: every map and unmap is
    /// whole pages of this size (a multiple of the device's page).
    pub fn page_size(&self, kind: SegmentKind) -> Option<u64> {
        self.state.pages_mode.then(|| self.state.page_of(kind))
    }

    /// What page mapping has done, in pages mode.
    pub fn page_stats(&self) -> Option<PageStats> {
        self.state.pages_mode.then(|| {
            let mut stats = self.state.pages.stats;
            stats.mapped_bytes = self.state.reserved();
            stats
        })
    }

    /// Reserves room for `blocks` block records, so that a caller who knows how many blocks
    /// it will hold (trace replay) pays no reallocation while it runs.
    pub fn reserve_blocks(&mut self, blocks: usize) {
        self.state.blocks.reserve(blocks);
        self.state.links.reserve(blocks);
        self.state.cold.reserve(blocks);
    }

    /// The configuration the engine runs.
    pub fn config(&self) -> &Config {
        &self.state.config
    }

    /// Sets `per_process_memory_fraction` at run time (PyTorch's
    /// `torch.cuda.set_per_process_memory_fraction`) and recomputes the cap from it,
    /// `memory_limit_mb` (the smaller cap applies) and `device_memory`. Segments reserved
    /// above a lowered cap stay until they are released; new segments obey the new cap.
    /// Returns the new cap.
    ///
    /// # Errors
    ///
    /// [`EngineError::Config`] for a fraction outside 0 to 1, and [`EngineError::Cap`] when
    /// the device memory is unknown and no `memory_limit_mb` is set; the engine is then
    /// unchanged.
    pub fn set_per_process_memory_fraction(
        &mut self,
        fraction: f64,
        device_memory: Option<u64>,
    ) -> Result<Option<u64>, EngineError> {
        let mut config = self.state.config.clone();
        config.per_process_memory_fraction = Some(fraction);
        config.validate()?;
        let cap = config.memory_cap(device_memory)?;
        self.state.config = config;
        self.state.cap = cap;
        Ok(cap)
    }

    /// The largest request the engine serves: the largest segment the source can create
    /// (in pages mode, the largest address range it can reserve), rounded down to 512 B.
    /// [`allocate`](Engine::allocate) refuses anything larger with
    /// [`AllocError::TooLarge`], whose `max` is this value.
    pub fn max_block_size(&self) -> u64 {
        self.state.max_segment_size
    }

    /// Where [`max_block_size`](Engine::max_block_size) comes from.
    pub fn max_block_limit(&self) -> SizeLimit {
        self.state.size_limit
    }

    /// The cap on reserved bytes, if any.
    pub fn memory_cap(&self) -> Option<u64> {
        self.state.cap
    }

    /// Lowers the cap to `bytes` if it is higher or unset (a budget the pool keeps on top of
    /// the configuration's cap), and returns the cap.
    pub fn limit_cap(&mut self, bytes: u64) -> u64 {
        let cap = self.state.cap.map_or(bytes, |cap| cap.min(bytes));
        self.state.cap = Some(cap);
        cap
    }

    /// A copy of the statistics.
    pub fn memory_stats(&self) -> MemoryStats {
        self.state.stats.with_active()
    }

    /// Sets every peak statistic to its current value.
    pub fn reset_peak_stats(&mut self) {
        self.state.stats.reset_peak();
        self.state.pages.stats.physical_peak = self.state.physical();
    }

    /// Zeroes the accumulated statistics and counters.
    pub fn reset_accumulated_stats(&mut self) {
        self.state.stats.reset_accumulated();
    }

    /// The statistics as `torch.cuda.memory_stats()` returns them: the same 122 keys and
    /// values (see [`MemoryStats::to_pytorch_map`]).
    pub fn pytorch_memory_stats(&self) -> std::collections::BTreeMap<String, i64> {
        self.memory_stats()
            .to_pytorch_map(self.state.config.max_split_size)
    }

    /// The statistics as a text table (PyTorch's `memory_summary`).
    pub fn memory_summary(&self) -> String {
        summary::render(
            &self.memory_stats(),
            &self.state.config,
            self.state.cap,
            self.memory_mode(),
            self.page_stats(),
        )
    }

    /// Where a live block is, or `None` for a stale id.
    pub fn allocation(&self, id: BlockId) -> Option<Allocation> {
        let b = self.state.live_block(id)?;
        Some(Allocation {
            block: id,
            segment: SegmentId(b.segment),
            offset: b.offset(),
            block_size: b.size(),
            requested: b.requested,
            kind: b.kind,
            address: b.address(),
        })
    }

    /// Serves `size` bytes on `stream` (a number the caller assigns; blocks are reused only on
    /// the stream that freed them).
    ///
    /// The request is rounded (512 B, then `roundup_power2_divisions`), looked up best-fit in
    /// its kind's free blocks of the same stream, and on a miss goes down the retry chain:
    /// garbage collection (with a cap and a threshold), a new segment, releasing cached
    /// oversize blocks, releasing every cached block (counted in `num_alloc_retries`), and
    /// finally [`AllocError::OutOfMemory`] (counted in `num_ooms`).
    ///
    /// # Errors
    ///
    /// [`AllocError::ZeroSize`] for 0 bytes, [`AllocError::TooLarge`] above the largest
    /// segment, [`AllocError::OutOfMemory`] when the retry chain found nothing (the engine
    /// is unchanged but for the cached segments released), and [`AllocError::Source`] when
    /// the source failed otherwise (nothing released, nothing retried).
    pub fn allocate(
        &mut self,
        size: u64,
        stream: u32,
        source: &mut dyn SegmentSource,
    ) -> Result<Allocation, AllocError> {
        let state = &mut self.state;
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if size > state.max_segment_size {
            return Err(AllocError::TooLarge {
                requested: size,
                max: state.max_segment_size,
                limit: state.size_limit,
            });
        }
        let rounded = round_request(&state.config, size);
        if rounded > state.max_segment_size {
            return Err(AllocError::TooLarge {
                requested: rounded,
                max: state.max_segment_size,
                limit: state.size_limit,
            });
        }
        state.clock += 1;
        let kind = SegmentKind::for_size(rounded);
        if state.gc_active() {
            state.search_count[kind.index()] += 1;
        }
        let block = match self
            .policy
            .candidate(StateView::new(state), kind, stream, rounded)
        {
            Some(key) => {
                // The block's record is read and written next: load it while the index
                // removes the key.
                preload_record(&state.blocks, key.block);
                state.free_index[kind.index()].remove(&key);
                key.block
            }
            None => {
                let request = Request {
                    kind,
                    stream,
                    requested: size,
                    rounded,
                };
                self.policy.grow(&mut Growth::new(state), request, source)?
            }
        };
        Ok(state.take_block(block, rounded, size))
    }

    /// Returns a block to the free blocks of its kind, merging it with free neighbours in
    /// its segment.
    ///
    /// # Errors
    ///
    /// [`FreeError::NotLive`] for an id that is not live (freed already, or from another
    /// engine); the engine is unchanged.
    pub fn free(&mut self, id: BlockId, source: &mut dyn SegmentSource) -> Result<(), FreeError> {
        if self.state.live_block(id).is_none() {
            return Err(FreeError::NotLive(id));
        }
        self.state.clock += 1;
        // Evicted blocks exist only under oversubscription: skip hashing the id otherwise.
        if !self.state.pages.evicted.is_empty() && self.free_if_evicted(id, source) {
            return Ok(());
        }
        let merged = self.state.free_block(id.index);
        if self.policy.release_on_free() {
            self.state.release_block(merged, source);
        }
        Ok(())
    }

    /// Frees live block `id` if it is evicted, and releases its segment if that empties it;
    /// returns whether it was. Out of [`Self::free`]'s common path, which it would otherwise
    /// crowd: only oversubscription evicts.
    #[cold]
    #[inline(never)]
    fn free_if_evicted(&mut self, id: BlockId, source: &mut dyn SegmentSource) -> bool {
        let Some(run) = self.state.pages.evicted.remove(&id.index) else {
            return false;
        };
        let segment = self.state.blocks[id.index as usize].segment;
        self.state.free_evicted_block(id.index, run);
        self.state.release_if_empty(segment, source);
        true
    }

    /// Counts `count` blocks of `kind`, of `bytes` block bytes and `requested` requested
    /// bytes in all, as freed and allocated again without any change to the layout. A caller
    /// that hands a block it freed straight back to a request of the same size (the pool's
    /// reuse cache) reports it here, so that the accumulated totals match;
    /// `oversize` of them are at least `max_split_size`.
    pub fn record_reuse(
        &mut self,
        kind: SegmentKind,
        count: u64,
        bytes: u64,
        requested: u64,
        oversize: u64,
    ) {
        let stats = &mut self.state.stats;
        stats.oversize_allocations.add_round_trip(oversize);
        stats.allocation.all.add_round_trip(count);
        stats.allocation.pool_mut(kind).add_round_trip(count);
        for (array, amount) in [
            (&mut stats.allocated_bytes, bytes),
            (&mut stats.requested_bytes, requested),
        ] {
            array.all.add_round_trip(amount);
            array.pool_mut(kind).add_round_trip(amount);
        }
    }

    /// Takes back the count of one out-of-memory that the caller served elsewhere (the
    /// pool's host overflow): `num_ooms` counts only requests that failed.
    pub(crate) fn uncount_oom(&mut self) {
        let ooms = &mut self.state.stats.num_ooms;
        *ooms = ooms.saturating_sub(1);
    }

    /// Releases every cached segment that holds no live block (PyTorch's `empty_cache`).
    /// Segments with live blocks stay, so `inactive_split` memory remains reserved. In pages
    /// mode, every idle page (a whole page of a free block) is unmapped and its memory
    /// freed, and ranges left without a mapped page are released; pages the source refuses
    /// to unmap stay mapped.
    pub fn empty_cache(&mut self, source: &mut dyn SegmentSource) {
        if self.state.pages_mode {
            // A source that refuses to unmap keeps its pages; there is nothing else to do.
            let batched = self.state.config.policy == Policy::Compact;
            let _ = self.state.unmap_all_idle(batched, source);
        } else {
            self.state.release_cached_blocks(source);
        }
    }

    /// Every segment with its blocks, in segment-id order.
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        self.state.snapshot()
    }

    /// Recounts every current statistic from the layout and checks the structural
    /// invariants: blocks tile their segment without gaps or overlap, are 512 B aligned, no
    /// two free blocks are adjacent, every free block is indexed exactly once and no
    /// allocated block is.
    ///
    /// # Errors
    ///
    /// [`InvariantError`]: the first violation found, by the part of the engine it
    /// concerns, its message describing it.
    pub fn check_invariants(&self) -> Result<(), InvariantError> {
        self.state.check_invariants()
    }
}
