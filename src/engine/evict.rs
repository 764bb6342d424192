//! Evicted blocks (pages mode): allocated blocks whose whole interior pages are unmapped,
//! so that the memory behind them serves other blocks while the blocks keep their addresses.
//!
//! A block's interior is the run of whole pages inside it; the pages at its two ends, which
//! neighbouring blocks may share, stay mapped. Evicting unmaps the interior (the caller has
//! copied the contents out first); restoring maps fresh pages there (the caller copies the
//! contents back). While a block is evicted:
//!
//! - it stays allocated: its id, address and statistics as an allocation do not change;
//! - its interior counts as unmapped: `reserved_bytes` and physical memory drop by it, as for
//!   any unmapped page, so caps and budgets see the memory given back;
//! - freeing it leaves the interior unmapped, as free address space, and the ends free and
//!   mapped, as a freed block would be.
//!
//! Guarantee: the engine's invariants ([`Engine::check_invariants`](super::Engine)) hold
//! before and after each call, with evicted blocks counted as above.

use std::ops::Range;

use super::Engine;
use super::error::{FreeError, OomCause};
use super::page_layout::round_up_to_page;
use super::segments::NoSegment;
use super::source::{SegmentSource, SourceError};
use super::state::EngineState;
use super::types::{BlockId, SegmentId};

/// Why a block could not be evicted or restored. The block is unchanged.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EvictError {
    /// The block is not live in this engine.
    #[error(transparent)]
    NotLive(#[from] FreeError),
    /// The engine keeps fixed segments: a block cannot give back part of one.
    #[error("only a pool in pages mode can evict a block and keep its address")]
    NotPages,
    /// Restoring needs memory that the cap, or the device, does not have now. Nothing was
    /// counted as an out-of-memory: make room and retry.
    #[error("restoring {} needs memory that is not there: {cause}", crate::format::bytes(*bytes))]
    NoRoom {
        /// The bytes the restore maps.
        bytes: u64,
        /// The cap, or the device's refusal.
        cause: OomCause,
    },
    /// The source refused the unmap or the map.
    #[error("the page mapping refused: {0}")]
    Source(#[source] SourceError),
}

crate::error_debug::debug_as_message!(EvictError);

impl EngineState {
    /// The run of whole pages inside live block `index`, if any.
    pub(super) fn interior(&self, index: u32) -> Option<Range<u64>> {
        let b = &self.blocks[index as usize];
        let page = self.page_of(b.kind);
        let (offset, end) = (b.offset(), b.offset() + b.size());
        let low = round_up_to_page(offset, page);
        let high = end / page * page;
        (low < high).then_some(low..high)
    }

    /// Frees evicted block `index`, whose `run` is unmapped: the run becomes free address
    /// space, the ends free mapped blocks. Nothing is unmapped: the run already is.
    pub(super) fn free_evicted_block(&mut self, index: u32, run: Range<u64>) {
        let (offset, size) = {
            let b = &self.blocks[index as usize];
            (b.offset(), b.size())
        };
        // The statistics of a free, then the layout: the block is cut where the run starts
        // and ends, each end merged as a freed block, the run as unmapped space.
        self.count_free(index);
        let kind = self.blocks[index as usize].kind;
        self.stats.evicted_bytes.decrease(kind, run.end - run.start);
        self.links.set_allocated(index, false);
        let mut middle = index;
        let mut head = None;
        if run.start > offset {
            middle = self.cut(index, run.start - offset);
            head = Some(index);
        }
        let tail = (run.end < offset + size).then(|| self.cut(middle, run.end - run.start));
        self.links.set_unmapped(middle, true);
        self.merge_unmapped(middle);
        for part in head.into_iter().chain(tail) {
            self.merge_free_block(part);
        }
    }
}

impl Engine {
    /// Whether live block `id` is evicted.
    pub fn is_evicted(&self, id: BlockId) -> bool {
        self.state.pages.evicted.contains_key(&id.index) && self.state.live_block(id).is_some()
    }

    /// The whole pages inside live block `id`, as offsets in its segment: what
    /// [`evict`](Self::evict) unmaps. `None` for a block smaller than a page, one not live,
    /// or in segments mode.
    pub fn evictable_run(&self, id: BlockId) -> Option<Range<u64>> {
        if !self.state.pages_mode {
            return None;
        }
        self.state.live_block(id)?;
        self.state.interior(id.index)
    }

    /// Bytes a call of [`evict`](Self::evict) on `id` would unmap: its whole interior
    /// pages (0 for a block smaller than a page, or in segments mode).
    pub fn evictable_bytes(&self, id: BlockId) -> u64 {
        if !self.state.pages_mode || self.state.live_block(id).is_none() {
            return 0;
        }
        self.state
            .interior(id.index)
            .map_or(0, |run| run.end - run.start)
    }

    /// Unmaps the whole pages inside live block `id` (the caller copied its contents out
    /// first), in one bind, and gives the memory back to the device (the engine holds none
    /// between calls). Returns the bytes unmapped (0 for a block smaller than a page, or one
    /// evicted already).
    ///
    /// # Errors
    ///
    /// [`EvictError::NotLive`] for a block not live here, [`EvictError::NotPages`] in
    /// segments mode, [`EvictError::Source`] when the source refuses the unmap (the block is
    /// then unchanged).
    pub fn evict(
        &mut self,
        id: BlockId,
        source: &mut dyn SegmentSource,
    ) -> Result<u64, EvictError> {
        if self.state.live_block(id).is_none() {
            return Err(FreeError::NotLive(id).into());
        }
        if !self.state.pages_mode {
            return Err(EvictError::NotPages);
        }
        if self.state.pages.evicted.contains_key(&id.index) {
            return Ok(0);
        }
        let Some(run) = self.state.interior(id.index) else {
            return Ok(0);
        };
        let (kind, segment) = {
            let b = &self.state.blocks[id.index as usize];
            (b.kind, b.segment)
        };
        source
            .unmap_pages(SegmentId(segment), std::slice::from_ref(&run))
            .map_err(EvictError::Source)?;
        let bytes = run.end - run.start;
        let state = &mut self.state;
        state.pages.evicted.insert(id.index, run);
        let stats = &mut state.pages.stats;
        stats.spare_bytes += bytes;
        stats.unmapped_total += bytes;
        stats.bind_calls += 1;
        state.stats.num_device_free += 1;
        state.stats.reserved_bytes.decrease(kind, bytes);
        state.stats.evicted_bytes.increase(kind, bytes);
        state.stats.num_evictions += 1;
        state.release_spare(source);
        Ok(bytes)
    }

    /// Maps fresh pages inside evicted block `id` again, in one bind (the caller then copies
    /// its contents back). Returns the bytes mapped (0 for a block not evicted).
    ///
    /// # Errors
    ///
    /// [`EvictError::NotLive`] for a block not live here; [`EvictError::NoRoom`] when the
    /// pages would take physical memory over the cap, or the source has no memory for them
    /// (the block stays evicted; make room and retry); [`EvictError::Source`] for any other
    /// refusal of the source.
    pub fn restore(
        &mut self,
        id: BlockId,
        source: &mut dyn SegmentSource,
    ) -> Result<u64, EvictError> {
        if self.state.live_block(id).is_none() {
            return Err(FreeError::NotLive(id).into());
        }
        let Some(run) = self.state.pages.evicted.get(&id.index).cloned() else {
            return Ok(0);
        };
        let (kind, segment) = {
            let b = &self.state.blocks[id.index as usize];
            (b.kind, b.segment)
        };
        let bytes = run.end - run.start;
        let over_cap = |state: &EngineState| {
            let new_memory = bytes - bytes.min(state.pages.stats.spare_bytes);
            state
                .cap
                .is_some_and(|cap| state.physical().saturating_add(new_memory) > cap)
        };
        if over_cap(&self.state) {
            // Idle pages of free blocks go before any live block has to: their memory is
            // then spare, for this map.
            let excess = self.state.physical().saturating_add(bytes);
            let excess = excess.saturating_sub(self.state.cap.unwrap_or(u64::MAX));
            let _ = self.state.recycle_idle(excess, [u32::MAX; 2], None, source);
        }
        let spare = self.state.pages.stats.spare_bytes;
        let over_cap = over_cap(&self.state);
        let mapped = if over_cap {
            Err(NoSegment::Cap)
        } else {
            source
                .map_pages(SegmentId(segment), std::slice::from_ref(&run))
                .map_err(NoSegment::Source)
        };
        if let Err(why) = mapped {
            return Err(match why {
                NoSegment::Cap => EvictError::NoRoom {
                    bytes,
                    cause: OomCause::Cap,
                },
                NoSegment::Source(error) if error.is_out_of_memory() => EvictError::NoRoom {
                    bytes,
                    cause: OomCause::Device(error),
                },
                NoSegment::Source(error) => EvictError::Source(error),
            });
        }
        let state = &mut self.state;
        state.pages.evicted.remove(&id.index);
        let stats = &mut state.pages.stats;
        stats.spare_bytes -= bytes.min(spare);
        stats.mapped_total += bytes;
        stats.bind_calls += 1;
        state.stats.num_device_alloc += 1;
        state.stats.reserved_bytes.increase(kind, bytes);
        state.stats.evicted_bytes.decrease(kind, bytes);
        state.stats.num_restores += 1;
        state.note_physical();
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::engine::{EngineLimits, MemoryMode, VirtualSegments};

    const PAGE: u64 = 64 << 10;
    const MIB: u64 = 1 << 20;

    fn pages_engine(conf: &str) -> (Engine, VirtualSegments) {
        let limits = EngineLimits::unlimited().with_page_mapping(Some(VirtualSegments::H200_PAGES));
        let engine = Engine::new(Config::parse(conf).unwrap(), limits).unwrap();
        assert_eq!(engine.memory_mode(), MemoryMode::Pages);
        (engine, VirtualSegments::unlimited())
    }

    fn reserved(engine: &Engine) -> u64 {
        engine.memory_stats().reserved_bytes.all.current
    }

    #[test]
    fn evicting_unmaps_the_interior_and_restoring_maps_it_again() {
        let (mut engine, mut device) = pages_engine("");
        let a = engine.allocate(10 * MIB + 1000, 0, &mut device).unwrap();
        let interior = engine.evictable_bytes(a.block);
        assert!(
            interior >= 10 * MIB - 2 * PAGE && interior % PAGE == 0,
            "{interior}"
        );
        let before = reserved(&engine);
        let allocated = engine.memory_stats().allocated_bytes.all.current;
        assert_eq!(engine.evict(a.block, &mut device), Ok(interior));
        assert!(engine.is_evicted(a.block));
        assert_eq!(reserved(&engine), before - interior);
        assert_eq!(engine.memory_stats().allocated_bytes.all.current, allocated);
        assert_eq!(device.mapped_bytes, before - interior);
        let stats = engine.memory_stats();
        assert_eq!(stats.evicted_bytes.all.current, interior);
        assert_eq!(stats.evicted_bytes.large_pool.current, interior);
        assert_eq!(stats.num_evictions, 1);
        engine.check_invariants().unwrap();
        // Twice is nothing.
        assert_eq!(engine.evict(a.block, &mut device), Ok(0));
        assert_eq!(engine.restore(a.block, &mut device), Ok(interior));
        assert!(!engine.is_evicted(a.block));
        assert_eq!(reserved(&engine), before);
        assert_eq!(engine.restore(a.block, &mut device), Ok(0));
        let stats = engine.memory_stats();
        assert_eq!(stats.evicted_bytes.all.current, 0);
        assert_eq!(stats.evicted_bytes.all.peak, interior);
        assert_eq!((stats.num_evictions, stats.num_restores), (1, 1));
        let map = stats.to_map();
        assert_eq!(map["evicted_bytes.all.allocated"], interior);
        assert_eq!(map["num_restores"], 1);
        let torch = engine.pytorch_memory_stats();
        assert!(
            !torch
                .keys()
                .any(|k| k.contains("evict") || k.contains("restore"))
        );
        engine.check_invariants().unwrap();
        engine.free(a.block, &mut device).unwrap();
        engine.empty_cache(&mut device);
        assert_eq!(reserved(&engine), 0);
        engine.check_invariants().unwrap();
    }

    #[test]
    fn a_block_freed_while_evicted_leaves_its_interior_unmapped() {
        let (mut engine, mut device) = pages_engine("");
        let low = engine.allocate(3 * PAGE + 512, 0, &mut device).unwrap();
        let a = engine.allocate(10 * MIB + 1000, 0, &mut device).unwrap();
        let high = engine.allocate(3 * PAGE + 512, 0, &mut device).unwrap();
        let interior = engine.evict(a.block, &mut device).unwrap();
        let before = reserved(&engine);
        engine.free(a.block, &mut device).unwrap();
        engine.check_invariants().unwrap();
        assert_eq!(engine.memory_stats().evicted_bytes.all.current, 0);
        assert_eq!(engine.memory_stats().evicted_bytes.all.freed, interior);
        assert_eq!(
            reserved(&engine),
            before,
            "the ends stay mapped, the interior unmapped"
        );
        assert!(!engine.is_evicted(a.block));
        assert_eq!(
            engine.evict(a.block, &mut device),
            Err(FreeError::NotLive(a.block).into())
        );
        // The space serves a new block, mapped anew where it needs pages.
        let b = engine.allocate(10 * MIB, 0, &mut device).unwrap();
        engine.check_invariants().unwrap();
        assert!(reserved(&engine) >= b.block_size, "b's pages are mapped");
        assert!(interior > 0);
        for block in [low, b, high] {
            engine.free(block.block, &mut device).unwrap();
        }
        engine.empty_cache(&mut device);
        assert_eq!(reserved(&engine), 0);
        engine.check_invariants().unwrap();
    }

    #[test]
    fn under_a_cap_eviction_makes_room_and_a_restore_waits_for_it() {
        let (mut engine, mut device) = pages_engine("memory_limit_mb:64");
        let a = engine.allocate(40 * MIB, 0, &mut device).unwrap();
        assert!(
            engine.allocate(40 * MIB, 0, &mut device).is_err(),
            "over the cap"
        );
        engine.evict(a.block, &mut device).unwrap();
        let b = engine.allocate(40 * MIB, 0, &mut device).unwrap();
        let refused = engine.restore(a.block, &mut device).unwrap_err();
        assert!(
            matches!(
                refused,
                EvictError::NoRoom {
                    cause: OomCause::Cap,
                    ..
                }
            ),
            "{refused}"
        );
        assert!(engine.is_evicted(a.block));
        let ooms = engine.memory_stats().num_ooms;
        engine.free(b.block, &mut device).unwrap();
        engine.empty_cache(&mut device);
        engine.restore(a.block, &mut device).unwrap();
        assert_eq!(
            engine.memory_stats().num_ooms,
            ooms,
            "a refused restore is no OOM"
        );
        engine.check_invariants().unwrap();
    }

    #[test]
    fn small_blocks_and_fixed_segments_evict_nothing() {
        let (mut engine, mut device) = pages_engine("");
        let small = engine.allocate(PAGE / 2, 0, &mut device).unwrap();
        assert_eq!(engine.evictable_bytes(small.block), 0);
        assert_eq!(engine.evict(small.block, &mut device), Ok(0));
        assert!(!engine.is_evicted(small.block));
        let mut fixed = Engine::new(Config::default(), EngineLimits::unlimited()).unwrap();
        let block = fixed.allocate(10 * MIB, 0, &mut device).unwrap();
        assert_eq!(
            fixed.evict(block.block, &mut device),
            Err(EvictError::NotPages)
        );
        assert_eq!(fixed.evictable_bytes(block.block), 0);
    }
}
