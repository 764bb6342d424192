//! `policy:pytorch,expandable_segments:True`: PyTorch's expandable segments, rule for rule.
//!
//! One growing range per stream and segment kind, mapped in pages of 2 MiB (small) and
//! 20 MiB (large), as PyTorch's `ExpandableSegment` does (`find_expandable_block`,
//! `map_block`, `try_allocate_expandable_block`):
//! - a request first takes the best-fitting free mapped block, preferring, among blocks of
//!   about the same size, one that is not followed by unmapped space (its expandable size);
//! - on a miss, the lowest-addressed run of free and unmapped blocks that can hold the
//!   request is found (or a new range reserved), and the pages it lacks are mapped;
//! - under a cap, the check is PyTorch's: mapped bytes plus the segment size the request
//!   would get in segments mode, once before mapping; the pages then mapped are not
//!   checked again, so mapped bytes may end above the cap by less than a page (a 20 MiB
//!   page for a 12 MiB request passes a check of 12 MiB);
//! - cached pages are unmapped, and their memory freed, only when cached blocks are
//!   released (`empty_cache`, or the last step of the retry chain).

use super::{PlacementPolicy, Request};
use crate::engine::error::AllocError;
use crate::engine::free_index::FreeKey;
use crate::engine::links::NONE;
use crate::engine::rounding::{SegmentKind, segment_size_for};
use crate::engine::segments::NoSegment;
use crate::engine::source::SegmentSource;
use crate::engine::state::EngineState;

/// PyTorch's expandable segments.
#[derive(Debug, Default)]
pub(crate) struct ExpandablePolicy;

/// A block's size plus the unmapped block after it, if any: what it can grow to.
fn expandable_size(state: &EngineState, block: u32) -> u64 {
    let next = state.links.next(block);
    let tail = if state.links.is_unmapped_block(next) {
        state.blocks[next as usize].size()
    } else {
        0
    };
    state.blocks[block as usize].size() + tail
}

/// Whether the free blocks from `block` on (mapped or not) add up to `size` bytes.
fn has_room(state: &EngineState, mut block: u32, size: u64) -> bool {
    let mut bytes = 0;
    while bytes < size && block != NONE && !state.links.is_allocated(block) {
        bytes += state.blocks[block as usize].size();
        block = state.links.next(block);
    }
    bytes >= size
}

impl ExpandablePolicy {
    /// PyTorch's `find_expandable_block`: the lowest-addressed unmapped block (or the free
    /// block just before it) from which free and unmapped blocks hold `size` bytes; else a
    /// new range.
    fn find_room(
        &self,
        state: &mut EngineState,
        kind: SegmentKind,
        stream: u32,
        size: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let found = state
            .unmapped_by_address(kind, stream)
            .find_map(|unmapped| {
                let prev = state.links.prev(unmapped);
                let start = if state.links.is_free_block(prev) {
                    prev
                } else {
                    unmapped
                };
                has_room(state, start, size).then_some(start)
            });
        match found {
            Some(start) => Ok(start),
            None => state.reserve_range(kind, stream, size, source),
        }
    }

    /// PyTorch's `try_allocate_expandable_block`: maps what the run from the found block
    /// lacks, page by page from its start, and returns the free block that holds `size`.
    fn allocate_expandable(
        &self,
        state: &mut EngineState,
        kind: SegmentKind,
        stream: u32,
        size: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let page = state.page_of(kind);
        let mut candidate = self.find_room(state, kind, stream, size, source)?;
        if state.links.is_unmapped(candidate) {
            let bytes = size.min(state.blocks[candidate as usize].size());
            candidate = state.map_front_uncapped(candidate, bytes.div_ceil(page) * page, source)?;
        }
        while state.blocks[candidate as usize].size() < size {
            let remaining = size - state.blocks[candidate as usize].size();
            let next = state.links.next(candidate);
            let bytes = remaining.min(state.blocks[next as usize].size());
            candidate = state.map_front_uncapped(next, bytes.div_ceil(page) * page, source)?;
        }
        let key = state.key_of(candidate);
        state.free_index[kind.index()].remove(&key);
        Ok(candidate)
    }

    /// PyTorch's `alloc_block` in expandable mode: the cap check, then the mapping.
    fn alloc_block(
        &self,
        state: &mut EngineState,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let alloc_size = segment_size_for(&state.config, request.rounded);
        if state
            .cap
            .is_some_and(|cap| state.physical().saturating_add(alloc_size) > cap)
        {
            return Err(NoSegment::Cap);
        }
        self.allocate_expandable(state, request.kind, request.stream, request.rounded, source)
    }
}

/// PyTorch's `get_free_block` with expandable segments: best fit, but step on to the next
/// larger block while it can grow less (is not followed by as much unmapped space).
pub(crate) fn candidate_rule(
    state: &EngineState,
    kind: SegmentKind,
    stream: u32,
    rounded: u64,
) -> Option<FreeKey> {
    let mut fits = state.free_index[kind.index()].fits_ascending(stream, rounded);
    let mut best = fits.next()?;
    // Blocks come in ascending size, so a block with no unmapped space after it can grow no
    // more than any later one: the search stops at the first such block. Most blocks are
    // like that, and then plain best fit is the answer.
    while let tail = state.links.next(best.block)
        && state.links.is_unmapped_block(tail)
    {
        let best_room = best.size + state.blocks[tail as usize].size();
        let Some(next) = fits.next() else {
            break;
        };
        if expandable_size(state, next.block) >= best_room {
            break;
        }
        best = next;
    }
    state
        .passes_oversize_rules(best.size, rounded)
        .then_some(best)
}

impl PlacementPolicy for ExpandablePolicy {
    fn candidate(
        &mut self,
        state: &EngineState,
        kind: SegmentKind,
        stream: u32,
        rounded: u64,
    ) -> Option<FreeKey> {
        candidate_rule(state, kind, stream, rounded)
    }

    fn grow(
        &mut self,
        state: &mut EngineState,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, AllocError> {
        let segment_size = segment_size_for(&state.config, request.rounded);
        match self.alloc_block(state, request, source) {
            Ok(block) => return Ok(block),
            // Out-of-memory goes on down the chain; any other error ends it.
            Err(failure) => {
                EngineState::classify(failure)?;
            }
        }
        // PyTorch releases cached oversize blocks next; in expandable mode they are unmapped
        // with everything else by the release below.
        state
            .unmap_all_idle(false, source)
            .map_err(AllocError::Source)?;
        state.stats.num_alloc_retries += 1;
        let cause = match self.alloc_block(state, request, source) {
            Ok(block) => return Ok(block),
            Err(failure) => EngineState::classify(failure)?,
        };
        Err(state.out_of_memory(request, segment_size, cause))
    }
}
