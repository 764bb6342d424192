//! The engine's layout and statistics: every segment and block, the free index, and what
//! the rules of placement read. Only the engine's own paths change it: policies get a
//! read-only `policy::StateView` of it, and in `grow` a `policy::Growth` whose methods are
//! those paths.

use super::error::SizeLimit;
use super::free_index::{FreeIndex, FreeKey};
use super::idle::{IdleList, IdleSegment};
use super::links::BlockLinks;
use super::page_layout::PageState;
use super::records::{BlockCold, BlockRecord, SegmentRecord};
use super::rounding::{MIN_BLOCK_SIZE, SMALL_SIZE, SegmentKind};
use super::stats::MemoryStats;
use super::types::{BlockId, MAX_SEGMENT_SIZE};
use crate::config::Config;

/// The virtual address of the first segment.
pub(super) const FIRST_BASE: u64 = 1 << 40;

/// Segments, blocks, the free index and the statistics.
#[derive(Debug)]
pub(crate) struct EngineState {
    pub config: Config,
    pub cap: Option<u64>,
    pub max_segment_size: u64,
    pub segments: Vec<SegmentRecord>,
    pub free_segment_slots: Vec<u32>,
    pub blocks: Vec<BlockRecord>,
    pub links: BlockLinks,
    pub cold: Vec<BlockCold>,
    pub free_block_slots: Vec<u32>,
    /// Free blocks per segment kind.
    pub free_index: [FreeIndex; 2],
    /// Segments that hold a single free block, least recently idle first: what
    /// `empty_cache`, garbage collection and the compact policy release.
    pub idle_segments: IdleList,
    pub stats: MemoryStats,
    /// The virtual address of the next segment.
    pub next_base: u64,
    /// Per segment kind: free-block searches so far, counted while GC is active.
    pub search_count: [u64; 2],
    /// Operations so far (allocations and frees).
    pub clock: u64,
    /// Peak of allocated bytes over the engine's life (`reset_peak_stats` leaves it).
    pub lifetime_allocated_peak: u64,
    /// Peak of requested bytes over the engine's life (`reset_peak_stats` leaves it).
    pub lifetime_requested_peak: u64,
    /// Requested bytes of every allocation over the engine's life (no statistics reset
    /// clears it): what the recycling budgets of `policy:compact` grow with, in both modes
    /// (`compact_recycle_rate`).
    pub lifetime_requested_total: u64,
    /// Whether the engine runs in pages mode: every segment is an address range with pages
    /// mapped where blocks live.
    pub pages_mode: bool,
    /// Pages mode's own state (empty in segments mode).
    pub pages: PageState,
    /// Where `max_segment_size` comes from, for the too-large message.
    pub size_limit: SizeLimit,
}

impl EngineState {
    /// An engine state with no segments, for a configuration and its cap.
    pub fn new(
        config: Config,
        cap: Option<u64>,
        max_segment_size: u64,
        pages: Option<PageState>,
    ) -> EngineState {
        EngineState {
            config,
            cap,
            // Segments are whole 512 B granules: round the device's limit down to one.
            max_segment_size: max_segment_size.min(MAX_SEGMENT_SIZE) / MIN_BLOCK_SIZE
                * MIN_BLOCK_SIZE,
            segments: Vec::new(),
            free_segment_slots: Vec::new(),
            blocks: Vec::new(),
            links: BlockLinks::default(),
            cold: Vec::new(),
            free_block_slots: Vec::new(),
            free_index: [FreeIndex::default(), FreeIndex::default()],
            idle_segments: IdleList::new(),
            stats: MemoryStats::default(),
            next_base: FIRST_BASE,
            search_count: [0, 0],
            clock: 0,
            lifetime_allocated_peak: 0,
            lifetime_requested_peak: 0,
            lifetime_requested_total: 0,
            pages_mode: pages.is_some(),
            pages: pages.unwrap_or_default(),
            size_limit: SizeLimit::Engine,
        }
    }

    /// The record of a live block, or `None` for a stale or foreign id.
    pub fn live_block(&self, id: BlockId) -> Option<&BlockRecord> {
        self.blocks
            .get(id.index as usize)
            .filter(|b| b.serial == id.serial && b.in_use && self.links.is_allocated(id.index))
    }

    #[inline]
    pub fn is_oversize(&self, size: u64) -> bool {
        self.config.max_split_size.is_some_and(|m| size >= m)
    }

    /// The free-index key of a block.
    #[inline]
    pub fn key_of(&self, block: u32) -> FreeKey {
        let b = &self.blocks[block as usize];
        FreeKey {
            stream: b.stream,
            size: b.size(),
            address: b.address(),
            block,
        }
    }

    /// Whether a block shares its segment with other blocks.
    #[inline]
    pub fn is_split(&self, block: u32) -> bool {
        self.links.is_split(block)
    }

    /// `max_split_size_mb`: a request below it never takes a block at or above it, and a
    /// request at or above it takes a block only if it is less than
    /// `max_non_split_rounding_mb` larger.
    #[inline]
    pub fn passes_oversize_rules(&self, block_size: u64, rounded: u64) -> bool {
        match self.config.max_split_size {
            None => true,
            Some(max_split) if rounded < max_split => block_size < max_split,
            Some(_) => block_size < rounded.saturating_add(self.config.max_non_split_rounding),
        }
    }

    /// Whether garbage collection runs: a cap and a threshold.
    #[inline]
    pub fn gc_active(&self) -> bool {
        self.cap.is_some() && self.config.garbage_collection_threshold.is_some()
    }

    /// PyTorch's `should_split`: in pages mode (as with PyTorch's expandable segments) any
    /// remainder of at least 512 B is split off.
    #[inline]
    pub fn should_split(&self, kind: SegmentKind, block_size: u64, rounded: u64) -> bool {
        let remaining = block_size - rounded;
        if self.pages_mode {
            return remaining >= MIN_BLOCK_SIZE;
        }
        match kind {
            SegmentKind::Small => remaining >= MIN_BLOCK_SIZE,
            SegmentKind::Large => !self.is_oversize(rounded) && remaining > SMALL_SIZE,
        }
    }

    /// The free blocks that span a whole segment (the idle segments, kept with fixed
    /// segments only), least recently idle first.
    pub fn idle_segment_blocks(&self) -> impl Iterator<Item = IdleSegment> + '_ {
        self.idle_segments.iter().map(|segment| {
            let s = &self.segments[segment as usize];
            IdleSegment {
                block: s.head,
                size: s.size,
                kind: s.kind,
                stream: s.stream,
                last_use: s.last_use,
            }
        })
    }

    /// Bytes reserved in segments now.
    #[inline]
    pub fn reserved(&self) -> u64 {
        self.stats.reserved_bytes.all.current
    }
}
