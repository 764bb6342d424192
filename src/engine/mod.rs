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

mod check;
mod compact;
mod error;
mod free_index;
mod idle;
mod links;
mod release;
pub mod rounding;
mod source;
pub mod stats;
mod summary;

pub use check::{BlockSnapshot, SegmentSnapshot};
pub use error::{AllocError, FreeError, OomCause, OutOfMemory};
pub use rounding::SegmentKind;
pub use source::{SegmentSource, VirtualSegments};
pub use stats::{MemoryStats, Stat, StatArray};

use crate::config::{Caching, Config, Policy};
use free_index::{FreeIndex, FreeKey};
use idle::IdleList;
use links::{BlockLinks, NONE};
use rounding::{MIN_BLOCK_SIZE, SMALL_SIZE, round_request, segment_size_for};

/// A segment: one device allocation, as the [`SegmentSource`] knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentId(pub u32);

/// A live block. Ids carry the record's serial number, which changes with every allocation
/// the record serves, so a stale id is refused rather than freeing a block that reused its
/// slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockId {
    index: u32,
    serial: u32,
}

/// Where a request was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Handle for [`Engine::free`].
    pub block: BlockId,
    /// The segment holding the block.
    pub segment: SegmentId,
    /// Byte offset of the block in its segment; a multiple of 512.
    pub offset: u64,
    /// The block's size: at least the request rounded up (a whole cached block may be
    /// larger); a multiple of 512.
    pub block_size: u64,
    /// The size the caller asked for.
    pub requested: u64,
    /// The kind of segment (small or large pool) the block lives in.
    pub kind: SegmentKind,
}

/// Limits that come from the device rather than from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineLimits {
    /// Total device memory, if known; `per_process_memory_fraction` applies to it.
    pub device_memory: Option<u64>,
    /// The largest segment the source can create (wgpu's `max_buffer_size`).
    pub max_segment_size: u64,
}

impl EngineLimits {
    /// No device size, and segments up to [`MAX_SEGMENT_SIZE`] (2 TiB).
    pub fn unlimited() -> Self {
        EngineLimits {
            device_memory: None,
            max_segment_size: MAX_SEGMENT_SIZE,
        }
    }
}

/// The virtual address of the first segment.
const FIRST_BASE: u64 = 1 << 40;

#[derive(Debug, Clone)]
pub(crate) struct SegmentRecord {
    pub size: u64,
    pub pool: SegmentKind,
    pub stream: u32,
    /// A virtual address, unique over the engine's life, that orders equal-size free blocks.
    pub base: u64,
    /// First block (lowest offset).
    pub head: u32,
    /// Whether the slot holds a segment.
    pub in_use: bool,
    /// The engine's operation clock when the segment last became wholly free (or was
    /// created).
    pub idle_since: u64,
}

/// What every allocation and free reads of a block, in 40 bytes. The segment's base, pool
/// and stream are copied in, so that neither path reads the segment. The links to the
/// neighbouring blocks and the allocated flag live in [`BlockLinks`].
///
/// With 100k live blocks the records are the largest thing the engine touches, and every
/// free reads one at random: the smaller they are, the more of them stay in the CPU's
/// caches. Sizes and offsets are therefore kept in 512 B granules, in 32 bits, which bounds
/// a segment to [`MAX_SEGMENT_SIZE`].
#[derive(Debug, Clone)]
pub(crate) struct BlockRecord {
    /// The segment's virtual address.
    pub base: u64,
    /// The caller's size, while allocated.
    pub requested: u64,
    granules: u32,
    offset_granules: u32,
    pub serial: u32,
    pub segment: u32,
    pub stream: u32,
    pub pool: SegmentKind,
    /// Whether the slot holds a block.
    pub in_use: bool,
}

const _: () = assert!(std::mem::size_of::<BlockRecord>() == 40);

/// The largest segment: 2 TiB less 512 B, so that sizes and offsets in 512 B granules fit
/// 32 bits.
pub const MAX_SEGMENT_SIZE: u64 = (u32::MAX as u64) << 9;

impl BlockRecord {
    #[inline]
    pub fn size(&self) -> u64 {
        (self.granules as u64) << 9
    }

    #[inline]
    pub fn set_size(&mut self, size: u64) {
        debug_assert!(size % MIN_BLOCK_SIZE == 0 && size <= MAX_SEGMENT_SIZE);
        self.granules = (size >> 9) as u32;
    }

    /// Offset in the segment.
    #[inline]
    pub fn offset(&self) -> u64 {
        (self.offset_granules as u64) << 9
    }

    /// The virtual address: the segment's base plus the offset.
    #[inline]
    pub fn address(&self) -> u64 {
        self.base + self.offset()
    }

    #[inline]
    fn segment_fields(&self) -> SegmentFields {
        SegmentFields {
            segment: self.segment,
            base: self.base,
            stream: self.stream,
            pool: self.pool,
        }
    }
}

/// What a block record copies from its segment's record.
#[derive(Debug, Clone, Copy)]
struct SegmentFields {
    segment: u32,
    base: u64,
    stream: u32,
    pool: SegmentKind,
}

/// What only garbage collection reads of a block, kept apart from [`BlockRecord`] and
/// written only while garbage collection is active.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BlockCold {
    /// The pool's search counter when the block was last freed (PyTorch's `gc_count_base`).
    pub gc_base: u64,
}

/// The placement engine. See the [module documentation](self).
#[derive(Debug)]
pub struct Engine {
    pub(crate) config: Config,
    pub(crate) cap: Option<u64>,
    pub(crate) max_segment_size: u64,
    pub(crate) segments: Vec<SegmentRecord>,
    free_segment_slots: Vec<u32>,
    pub(crate) blocks: Vec<BlockRecord>,
    pub(crate) links: BlockLinks,
    pub(crate) cold: Vec<BlockCold>,
    free_block_slots: Vec<u32>,
    pub(crate) free_index: [FreeIndex; 2],
    /// Segments that hold a single free block, least recently idle first: what
    /// `empty_cache`, garbage collection and the compact policy release.
    pub(crate) idle: IdleList,
    pub(crate) stats: MemoryStats,
    next_base: u64,
    /// Per pool: free-block searches so far, counted while GC is active.
    pub(crate) search_count: [u64; 2],
    /// Operations so far (allocations and frees).
    pub(crate) clock: u64,
    pub(crate) compact: compact::CompactState,
}

impl Engine {
    /// Creates an engine with no segments.
    ///
    /// Fails when the configuration cannot be applied to these limits: a
    /// `per_process_memory_fraction` with no known device size and no `memory_limit_mb`.
    pub fn new(config: Config, limits: EngineLimits) -> Result<Engine, String> {
        let cap = config.memory_cap(limits.device_memory)?;
        Ok(Engine {
            config,
            cap,
            // Segments are whole 512 B granules: round the device's limit down to one.
            max_segment_size: limits.max_segment_size.min(MAX_SEGMENT_SIZE)
                / rounding::MIN_BLOCK_SIZE
                * rounding::MIN_BLOCK_SIZE,
            segments: Vec::new(),
            free_segment_slots: Vec::new(),
            blocks: Vec::new(),
            links: BlockLinks::default(),
            cold: Vec::new(),
            free_block_slots: Vec::new(),
            free_index: [FreeIndex::default(), FreeIndex::default()],
            idle: IdleList::new(),
            stats: MemoryStats::default(),
            next_base: FIRST_BASE,
            search_count: [0, 0],
            clock: 0,
            compact: compact::CompactState::default(),
        })
    }

    /// Reserves room for `blocks` block records, so that a caller who knows how many blocks
    /// it will hold (trace replay) pays no reallocation while it runs.
    pub fn reserve_blocks(&mut self, blocks: usize) {
        self.blocks.reserve(blocks);
        self.links.reserve(blocks);
        self.cold.reserve(blocks);
    }

    /// The configuration the engine runs.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The cap on reserved bytes, if any.
    pub fn memory_cap(&self) -> Option<u64> {
        self.cap
    }

    /// A copy of the statistics.
    pub fn memory_stats(&self) -> MemoryStats {
        self.stats
    }

    /// Sets every peak statistic to its current value.
    pub fn reset_peak_stats(&mut self) {
        self.stats.reset_peak();
    }

    /// Zeroes the accumulated statistics and counters.
    pub fn reset_accumulated_stats(&mut self) {
        self.stats.reset_accumulated();
    }

    /// The statistics as a text table (PyTorch's `memory_summary`).
    pub fn memory_summary(&self) -> String {
        summary::render(&self.stats, &self.config, self.cap)
    }

    /// Where a live block is, or `None` for a stale id.
    pub fn allocation(&self, id: BlockId) -> Option<Allocation> {
        let b = self.live_block(id)?;
        Some(Allocation {
            block: id,
            segment: SegmentId(b.segment),
            offset: b.offset(),
            block_size: b.size(),
            requested: b.requested,
            kind: b.pool,
        })
    }

    fn live_block(&self, id: BlockId) -> Option<&BlockRecord> {
        self.blocks
            .get(id.index as usize)
            .filter(|b| b.serial == id.serial && b.in_use && self.links.is_allocated(id.index))
    }

    /// Serves `size` bytes on `stream` (a number the caller assigns; blocks are reused only on
    /// the stream that freed them).
    ///
    /// The request is rounded (512 B, then `roundup_power2_divisions`), looked up best-fit in
    /// its pool's free blocks of the same stream, and on a miss goes down the retry chain:
    /// garbage collection (with a cap and a threshold), a new segment, releasing cached
    /// oversize blocks, releasing every cached block (counted in `num_alloc_retries`), and
    /// finally [`AllocError::OutOfMemory`] (counted in `num_ooms`).
    pub fn allocate<S: SegmentSource + ?Sized>(
        &mut self,
        size: u64,
        stream: u32,
        source: &mut S,
    ) -> Result<Allocation, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }

        if size > self.max_segment_size {
            return Err(AllocError::TooLarge {
                requested: size,
                max: self.max_segment_size,
            });
        }
        let rounded = round_request(&self.config, size);
        if rounded > self.max_segment_size {
            return Err(AllocError::TooLarge {
                requested: rounded,
                max: self.max_segment_size,
            });
        }
        self.clock += 1;
        let pool = SegmentKind::for_size(rounded);
        let found = match self.config.backend {
            Caching::Passthrough => None,
            Caching::Native => self.find_free_block(pool, stream, rounded),
        };
        let block = match found {
            Some(block) => block,
            None => self.serve_miss(pool, stream, size, rounded, source)?,
        };
        let allocation = self.take_block(block, rounded, size);
        if self.config.policy == Policy::Compact {
            compact::after_allocate(self);
        }
        Ok(allocation)
    }

    /// Returns a block to its pool, merging it with free neighbours in its segment.
    pub fn free<S: SegmentSource + ?Sized>(
        &mut self,
        id: BlockId,
        source: &mut S,
    ) -> Result<(), FreeError> {
        if self.live_block(id).is_none() {
            return Err(FreeError::NotLive(id));
        }
        self.clock += 1;
        let index = id.index;
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
        let (pool, size, requested) = {
            let b = &self.blocks[index as usize];
            (b.pool, b.size(), b.requested)
        };
        self.stats.allocation.decrease(pool, 1);
        self.stats.allocated_bytes.decrease(pool, size);
        if self.is_oversize(size) {
            self.stats.oversize_allocations.decrease(1);
        }
        let merged = self.merge_free_block(index);
        self.stats.active.decrease(pool, 1);
        self.stats.active_bytes.decrease(pool, size);
        self.stats.requested_bytes.decrease(pool, requested);
        if self.config.backend == Caching::Passthrough {
            self.release_block(merged, source);
        }
        Ok(())
    }

    /// Counts `count` blocks of the pool, of `bytes` block bytes and `requested` requested
    /// bytes in all, as freed and allocated again without any change to the layout. A caller
    /// that hands a block it freed straight back to a request of the same size (the pool's
    /// reuse cache) reports it here, so that the accumulated totals match;
    /// `oversize` of them are at least `max_split_size`.
    pub fn record_reuse(
        &mut self,
        pool: SegmentKind,
        count: u64,
        bytes: u64,
        requested: u64,
        oversize: u64,
    ) {
        self.stats.oversize_allocations.add_round_trip(oversize);
        for array in [&mut self.stats.allocation, &mut self.stats.active] {
            array.all.add_round_trip(count);
            array.pool_mut(pool).add_round_trip(count);
        }
        for (array, amount) in [
            (&mut self.stats.allocated_bytes, bytes),
            (&mut self.stats.active_bytes, bytes),
            (&mut self.stats.requested_bytes, requested),
        ] {
            array.all.add_round_trip(amount);
            array.pool_mut(pool).add_round_trip(amount);
        }
    }

    /// Releases every cached segment that holds no live block (PyTorch's `empty_cache`).
    /// Segments with live blocks stay, so `inactive_split` memory remains reserved.
    pub fn empty_cache<S: SegmentSource + ?Sized>(&mut self, source: &mut S) {
        self.release_cached_blocks(source);
    }

    #[inline]
    pub(crate) fn is_oversize(&self, size: u64) -> bool {
        self.config.max_split_size.is_some_and(|m| size >= m)
    }

    /// The free-index key of a block.
    #[inline]
    pub(crate) fn key_of(&self, block: u32) -> FreeKey {
        let b = &self.blocks[block as usize];
        FreeKey {
            stream: b.stream,
            size: b.size(),
            address: b.address(),
            block,
        }
    }

    #[inline]
    pub(crate) fn is_split(&self, block: u32) -> bool {
        self.links.is_split(block)
    }

    /// Removes and returns the free block that serves a `rounded` request, if the pool has one.
    fn find_free_block(&mut self, pool: SegmentKind, stream: u32, rounded: u64) -> Option<u32> {
        if self.gc_active() {
            self.search_count[pool.index()] += 1;
        }
        let key = match self.config.policy {
            Policy::Pytorch => self.pytorch_candidate(pool, stream, rounded),
            Policy::Compact => compact::candidate(self, pool, stream, rounded),
        }?;
        // The caller reads and writes the block's record next: load it while the index
        // removes the key.
        preload_record(&self.blocks, key.block);
        self.free_index[pool.index()].remove(&key);
        Some(key.block)
    }

    /// PyTorch's `get_free_block`: best fit, with the two oversize rules.
    pub(crate) fn pytorch_candidate(
        &self,
        pool: SegmentKind,
        stream: u32,
        rounded: u64,
    ) -> Option<FreeKey> {
        let key = self.free_index[pool.index()].best_fit(stream, rounded)?;
        self.passes_oversize_rules(key.size, rounded).then_some(key)
    }

    /// `max_split_size_mb`: a request below it never takes a block at or above it, and a
    /// request at or above it takes a block only if it is less than
    /// `max_non_split_rounding_mb` larger.
    pub(crate) fn passes_oversize_rules(&self, block_size: u64, rounded: u64) -> bool {
        match self.config.max_split_size {
            None => true,
            Some(max_split) if rounded < max_split => block_size < max_split,
            Some(_) => block_size < rounded + self.config.max_non_split_rounding,
        }
    }

    #[inline]
    pub(crate) fn gc_active(&self) -> bool {
        self.cap.is_some() && self.config.garbage_collection_threshold.is_some()
    }

    /// PyTorch's `should_split`.
    #[inline]
    fn should_split(&self, pool: SegmentKind, block_size: u64, rounded: u64) -> bool {
        let remaining = block_size - rounded;
        match pool {
            SegmentKind::Small => remaining >= MIN_BLOCK_SIZE,
            SegmentKind::Large => !self.is_oversize(rounded) && remaining > SMALL_SIZE,
        }
    }

    /// Marks a found free block allocated, splitting off the tail when worthwhile
    /// (PyTorch's `alloc_found_block`).
    fn take_block(&mut self, block: u32, rounded: u64, requested: u64) -> Allocation {
        let (segment, block_size, pool) = {
            let b = &self.blocks[block as usize];
            (b.segment, b.size(), b.pool)
        };
        let already_split = self.is_split(block);
        if !already_split {
            // A cached segment goes back to work (a new one was never idle).
            self.idle.remove(segment);
        }
        let split =
            self.config.backend == Caching::Native && self.should_split(pool, block_size, rounded);
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
            self.mark_freed(remainder, pool);
            if next != NONE {
                self.links.set_prev(next, remainder);
            }
            self.links.set_next(block, remainder);
            self.blocks[block as usize].set_size(rounded);
            let key = self.key_of(remainder);
            self.free_index[pool.index()].insert(key);
            if already_split {
                self.stats.inactive_split_bytes.decrease(pool, rounded);
            } else {
                self.stats
                    .inactive_split_bytes
                    .increase(pool, remaining_size);
                self.stats.inactive_split.increase(pool, 1);
            }
        } else if already_split {
            self.stats.inactive_split_bytes.decrease(pool, block_size);
            self.stats.inactive_split.decrease(pool, 1);
        }
        self.links.set_allocated(block, true);
        let b = &mut self.blocks[block as usize];
        b.requested = requested;
        // A fresh id for every allocation, so a handle kept past its free is refused even
        // when the same record serves the next request.
        b.serial = b.serial.wrapping_add(1);
        let (size, offset, serial) = (b.size(), b.offset(), b.serial);
        self.stats.allocation.increase(pool, 1);
        self.stats.allocated_bytes.increase(pool, size);
        self.stats.active.increase(pool, 1);
        self.stats.active_bytes.increase(pool, size);
        self.stats.requested_bytes.increase(pool, requested);
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
            kind: pool,
        }
    }

    /// Merges a just-freed block with its free neighbours, indexes the result, updates the
    /// inactive-split statistics (PyTorch's `free_block`), and returns the merged block.
    fn merge_free_block(&mut self, block: u32) -> u32 {
        let pool = self.blocks[block as usize].pool;
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        let prev = self.links.prev(block);
        let mut block = block;
        if self.links.is_free_block(prev) {
            let key = self.key_of(prev);
            self.free_index[pool.index()].remove(&key);
            // The lower neighbour survives so that the segment head never changes.
            self.absorb_next(prev);
            net_blocks -= 1;
            net_bytes -= key.size as i64;
            block = prev;
        }
        let next = self.links.next(block);
        if self.links.is_free_block(next) {
            let key = self.key_of(next);
            self.free_index[pool.index()].remove(&key);
            self.absorb_next(block);
            net_blocks -= 1;
            net_bytes -= key.size as i64;
        }
        if self.is_split(block) {
            net_blocks += 1;
            net_bytes += self.blocks[block as usize].size() as i64;
        }
        apply_net(&mut self.stats.inactive_split, pool, net_blocks);
        apply_net(&mut self.stats.inactive_split_bytes, pool, net_bytes);
        self.mark_freed(block, pool);
        if !self.is_split(block) {
            let segment = self.blocks[block as usize].segment;
            self.segments[segment as usize].idle_since = self.clock;
            self.idle.push_back(segment);
        }
        let key = self.key_of(block);
        self.free_index[pool.index()].insert(key);
        block
    }

    /// Records when a block became free, for garbage collection's ages.
    #[inline]
    fn mark_freed(&mut self, block: u32, pool: SegmentKind) {
        if self.gc_active() {
            self.cold[block as usize].gc_base = self.search_count[pool.index()];
        }
    }

    /// Folds `block`'s next neighbour into `block` and frees the neighbour's record.
    fn absorb_next(&mut self, block: u32) {
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
    fn new_block_record(&mut self, of: SegmentFields, offset: u64, size: u64) -> u32 {
        debug_assert!(offset % MIN_BLOCK_SIZE == 0 && offset + size <= MAX_SEGMENT_SIZE);
        let SegmentFields {
            segment,
            base,
            stream,
            pool,
        } = of;
        let record = |serial| BlockRecord {
            base,
            requested: 0,
            granules: (size >> 9) as u32,
            offset_granules: (offset >> 9) as u32,
            serial,
            segment,
            stream,
            pool,
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

    fn free_block_record(&mut self, block: u32) {
        self.blocks[block as usize].in_use = false;
        self.links.reset(block);
        self.free_block_slots.push(block);
    }

    /// Creates a segment of `size` bytes holding one free, unindexed block, or says why not.
    pub(crate) fn create_segment<S: SegmentSource + ?Sized>(
        &mut self,
        size: u64,
        pool: SegmentKind,
        stream: u32,
        source: &mut S,
    ) -> Result<u32, OomCause> {
        if self
            .cap
            .is_some_and(|cap| self.stats.reserved_bytes.all.current + size > cap)
        {
            return Err(OomCause::Cap);
        }
        let slot = match self.free_segment_slots.pop() {
            Some(slot) => slot,
            None => {
                self.segments.push(SegmentRecord {
                    size: 0,
                    pool,
                    stream,
                    base: 0,
                    head: NONE,
                    in_use: false,
                    idle_since: 0,
                });
                (self.segments.len() - 1) as u32
            }
        };
        if let Err(message) = source.create_segment(SegmentId(slot), size, pool) {
            self.free_segment_slots.push(slot);
            return Err(OomCause::Device(message));
        }
        let base = self.next_segment_base(size);
        self.segments[slot as usize] = SegmentRecord {
            size,
            pool,
            stream,
            base,
            head: NONE,
            in_use: true,
            idle_since: self.clock,
        };
        let of = SegmentFields {
            segment: slot,
            base,
            stream,
            pool,
        };
        let head = self.new_block_record(of, 0, size);
        self.segments[slot as usize].head = head;
        self.stats.segment.increase(pool, 1);
        self.stats.reserved_bytes.increase(pool, size);
        self.stats.num_device_alloc += 1;
        if self.is_oversize(size) {
            self.stats.oversize_segments.increase(1);
        }
        Ok(head)
    }

    /// A virtual address for a new segment of `size` bytes, after every live segment's. When
    /// the address space (128 PiB of segments created over the engine's life) runs out, the
    /// live segments are renumbered from the start, keeping their order.
    fn next_segment_base(&mut self, size: u64) -> u64 {
        if self.next_base + size >= free_index::ADDRESS_LIMIT {
            self.renumber_segments();
        }
        let base = self.next_base;
        self.next_base += size;
        base
    }

    fn renumber_segments(&mut self) {
        let mut live: Vec<u32> = (0..self.segments.len() as u32)
            .filter(|&s| self.segments[s as usize].in_use)
            .collect();
        live.sort_unstable_by_key(|&s| self.segments[s as usize].base);
        let indexed: Vec<u32> = self
            .free_index
            .iter()
            .flat_map(|index| index.iter().map(|k| k.block))
            .collect();
        self.free_index = [FreeIndex::default(), FreeIndex::default()];
        let mut base = FIRST_BASE;
        for s in live {
            self.segments[s as usize].base = base;
            let mut cursor = self.segments[s as usize].head;
            while cursor != NONE {
                self.blocks[cursor as usize].base = base;
                cursor = self.links.next(cursor);
            }
            base += self.segments[s as usize].size;
        }
        self.next_base = base;
        for block in indexed {
            let pool = self.segments[self.blocks[block as usize].segment as usize].pool;
            let key = self.key_of(block);
            self.free_index[pool.index()].insert(key);
        }
    }

    /// Releases the segment of a free block that spans its whole segment.
    pub(crate) fn release_block<S: SegmentSource + ?Sized>(&mut self, block: u32, source: &mut S) {
        debug_assert!(!self.is_split(block) && !self.links.is_allocated(block));
        let key = self.key_of(block);
        let segment = self.blocks[block as usize].segment;
        let (size, pool) = {
            let s = &self.segments[segment as usize];
            (s.size, s.pool)
        };
        self.free_index[pool.index()].remove(&key);
        let was_idle = self.idle.remove(segment);
        debug_assert!(was_idle, "segment {segment} released while not idle");
        self.free_block_record(block);
        self.segments[segment as usize].in_use = false;
        self.free_segment_slots.push(segment);
        source.release_segment(SegmentId(segment), size);
        self.stats.segment.decrease(pool, 1);
        self.stats.reserved_bytes.decrease(pool, size);
        self.stats.num_device_free += 1;
        if self.is_oversize(size) {
            self.stats.oversize_segments.decrease(1);
        }
    }

    /// The free blocks that span a whole segment, least recently idle first:
    /// (block, size, pool).
    pub(crate) fn idle_blocks(&self) -> impl Iterator<Item = (u32, u64, SegmentKind)> + '_ {
        self.idle.iter().map(|segment| {
            let s = &self.segments[segment as usize];
            (s.head, s.size, s.pool)
        })
    }

    /// The size of a new segment for a rounded request under this engine's settings.
    pub(crate) fn new_segment_size(&self, stream: u32, rounded: u64) -> u64 {
        match self.config.backend {
            Caching::Passthrough => rounded,
            Caching::Native => match self.config.policy {
                Policy::Pytorch => segment_size_for(&self.config, rounded),
                Policy::Compact => compact::segment_size(self, stream, rounded),
            }
            .min(self.max_segment_size),
        }
    }
}

/// Asks the CPU to start loading `records[index]` (when it exists) into the cache.
#[inline(always)]
fn preload_record(records: &[BlockRecord], index: u32) {
    #[cfg(target_arch = "x86_64")]
    if let Some(record) = records.get(index as usize) {
        // SAFETY: a prefetch only hints the cache; the pointer is to a live element.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                (record as *const BlockRecord).cast::<i8>(),
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (records, index);
}

fn apply_net(stat: &mut StatArray, pool: SegmentKind, net: i64) {
    if net > 0 {
        stat.increase(pool, net as u64);
    } else if net < 0 {
        stat.decrease(pool, (-net) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_virtual_addresses_renumbers_segments() {
        let mut engine = Engine::new(
            Config::parse("policy:pytorch").unwrap(),
            EngineLimits::unlimited(),
        )
        .unwrap();
        let mut device = VirtualSegments::unlimited();
        let a = engine.allocate(3 << 20, 0, &mut device).unwrap();
        let b = engine.allocate(30 << 20, 0, &mut device).unwrap();
        engine.free(a.block, &mut device).unwrap();
        engine.next_base = free_index::ADDRESS_LIMIT - (1 << 20);
        let c = engine.allocate(64 << 20, 0, &mut device).unwrap();
        engine.check_invariants().unwrap();
        assert!(
            engine.next_base < FIRST_BASE + (200 << 20),
            "segments were renumbered"
        );
        // The cached block is still found, by its renumbered key.
        let d = engine.allocate(3 << 20, 0, &mut device).unwrap();
        assert_eq!((d.segment, d.offset), (a.segment, a.offset));
        for id in [b.block, c.block, d.block] {
            engine.free(id, &mut device).unwrap();
        }
        engine.check_invariants().unwrap();
    }
}
