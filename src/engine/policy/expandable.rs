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

use super::{Growth, PlacementPolicy, Request, StateView};
use crate::engine::error::AllocError;
use crate::engine::free_index::{Cursor, FreeKey};
use crate::engine::links::NONE;
use crate::engine::rounding::{SegmentKind, segment_size_for};
use crate::engine::segments::NoSegment;
use crate::engine::source::SegmentSource;
use crate::engine::state::EngineState;

/// PyTorch's expandable segments.
#[derive(Debug, Default)]
pub(crate) struct ExpandablePolicy;

/// Whether the free blocks from `block` on (mapped or not) add up to `size` bytes.
fn has_room(state: StateView<'_>, mut block: u32, size: u64) -> bool {
    let mut bytes = 0;
    while bytes < size && block != NONE && !state.is_allocated(block) {
        bytes += state.block_size(block);
        block = state.next(block);
    }
    bytes >= size
}

impl ExpandablePolicy {
    /// PyTorch's `find_expandable_block`: the lowest-addressed unmapped block (or the free
    /// block just before it) from which free and unmapped blocks hold `size` bytes; else a
    /// new range.
    fn find_room(
        &self,
        engine: &mut Growth<'_>,
        kind: SegmentKind,
        stream: u32,
        size: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let state = engine.view();
        let found = state
            .unmapped_by_address(kind, stream)
            .find_map(|unmapped| {
                let prev = state.prev(unmapped);
                let start = if state.is_free_block(prev) {
                    prev
                } else {
                    unmapped
                };
                has_room(state, start, size).then_some(start)
            });
        match found {
            Some(start) => Ok(start),
            None => engine.reserve_range(kind, stream, size, source),
        }
    }

    /// PyTorch's `try_allocate_expandable_block`: maps what the run from the found block
    /// lacks, page by page from its start, and returns the free block that holds `size`.
    fn allocate_expandable(
        &self,
        engine: &mut Growth<'_>,
        kind: SegmentKind,
        stream: u32,
        size: u64,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let page = engine.view().page_of(kind);
        let mut candidate = self.find_room(engine, kind, stream, size, source)?;
        if engine.view().is_unmapped(candidate) {
            let bytes = size.min(engine.view().block_size(candidate));
            candidate =
                engine.map_front_uncapped(candidate, bytes.div_ceil(page) * page, source)?;
        }
        while engine.view().block_size(candidate) < size {
            let state = engine.view();
            let remaining = size - state.block_size(candidate);
            let next = state.next(candidate);
            let bytes = remaining.min(state.block_size(next));
            candidate = engine.map_front_uncapped(next, bytes.div_ceil(page) * page, source)?;
        }
        Ok(engine.take_free_block(candidate))
    }

    /// PyTorch's `alloc_block` in expandable mode: the cap check, then the mapping.
    fn alloc_block(
        &self,
        engine: &mut Growth<'_>,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let state = engine.view();
        let alloc_size = segment_size_for(state.config(), request.rounded);
        if state
            .cap()
            .is_some_and(|cap| state.physical().saturating_add(alloc_size) > cap)
        {
            return Err(NoSegment::Cap);
        }
        self.allocate_expandable(
            engine,
            request.kind,
            request.stream,
            request.rounded,
            source,
        )
    }
}

/// PyTorch's `get_free_block` with expandable segments: best fit, but step on to the next
/// larger block while it can grow less (is not followed by as much unmapped space).
///
/// The common case costs one best-fit search and one look at the found block's neighbour,
/// as `policy:pytorch`'s best fit does. Only where that neighbour is unmapped is the next
/// larger block looked up (a step through the index, not a search), and the walk runs only
/// where that block exists and is smaller than the room it must beat.
#[inline]
pub(crate) fn candidate_rule(
    state: StateView<'_>,
    kind: SegmentKind,
    stream: u32,
    rounded: u64,
) -> Option<FreeKey> {
    let found = state.free_blocks(kind).best_fit_cursor(stream, rounded)?;
    let mut best = found.key();
    let tail = state.next(best.block);
    if state.is_unmapped_block(tail) {
        let room = best.size + state.block_size(tail);
        if let Some(next) = found.next_below(room) {
            best = walk_past_tails(state, best, room, next);
        }
    }
    state
        .passes_oversize_rules(best.size, rounded)
        .then_some(best)
}

/// From `best`, a best fit that can grow to `best_room` bytes (its size plus the unmapped
/// block after it), and `next`, the next larger block, smaller than `best_room`: the next
/// larger blocks, as long as each can grow less than the one before (its size plus the
/// unmapped block after it, if any). Blocks come in ascending size, so a block with no
/// unmapped space after it can grow no more than any later one: the walk stops at the first
/// such block, as it does at the first block as large as the room it must beat.
#[inline]
fn walk_past_tails(
    state: StateView<'_>,
    mut best: FreeKey,
    mut best_room: u64,
    mut next: Cursor<'_>,
) -> FreeKey {
    loop {
        let key = next.key();
        let next_tail = state.next(key.block);
        let unmapped = state.is_unmapped_block(next_tail);
        let room = key.size
            + if unmapped {
                state.block_size(next_tail)
            } else {
                0
            };
        if room >= best_room {
            return best;
        }
        if !unmapped {
            return key;
        }
        (best, best_room) = (key, room);
        let Some(after) = next.next_below(best_room) else {
            return best;
        };
        next = after;
    }
}

impl PlacementPolicy for ExpandablePolicy {
    fn candidate(
        &mut self,
        state: StateView<'_>,
        kind: SegmentKind,
        stream: u32,
        rounded: u64,
    ) -> Option<FreeKey> {
        candidate_rule(state, kind, stream, rounded)
    }

    fn grow(
        &mut self,
        engine: &mut Growth<'_>,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, AllocError> {
        let segment_size = segment_size_for(engine.view().config(), request.rounded);
        match self.alloc_block(engine, request, source) {
            Ok(block) => return Ok(block),
            // Out-of-memory goes on down the chain; any other error ends it.
            Err(failure) => {
                EngineState::classify(failure)?;
            }
        }
        // PyTorch releases cached oversize blocks next; in expandable mode they are unmapped
        // with everything else by the release below.
        engine
            .unmap_all_idle(false, source)
            .map_err(AllocError::Source)?;
        engine.count_retry();
        let cause = match self.alloc_block(engine, request, source) {
            Ok(block) => return Ok(block),
            Err(failure) => EngineState::classify(failure)?,
        };
        Err(engine.out_of_memory(request, segment_size, cause))
    }
}
