//! `policy:compact` in pages mode (the default where pages can be mapped): physical memory
//! kept at the peak of live memory by recycling idle pages, within a budget of remapping.
//!
//! - A request takes the best-fitting free mapped block (PyTorch's best fit, with the
//!   oversize rules of `max_split_size_mb`). Pages stay mapped after a free.
//! - On a miss, the request goes where mapping it costs least: next to the unmapped block
//!   (in its kind's range on its stream) whose mapped free neighbour below covers most of
//!   it, the smallest such run first; a new range only when no run can hold it.
//! - A miss of the small kind (blocks up to 1 MiB) maps a granule, its own pages included
//!   (`compact_small_map_kb`, default 2 MiB, at most 1/512 of the peak of live memory)
//!   where the unmapped space has room and the cap allows it, so that the small requests
//!   after it find mapped memory instead of missing one by one.
//! - Before mapping new pages would take physical memory more than a slack above the peak of
//!   live (requested) memory so far, idle pages (whole pages of free blocks) are unmapped,
//!   least recently freed first, and their memory is mapped where the request goes instead
//!   of new memory. The slack is `compact_page_slack` (default 0.8%) of the peak once the
//!   bytes mapped over the engine's life reach 1 + `compact_slack_ramp` (default 0.3) times
//!   the peak, and in proportion before: none until a byte is mapped a second time. A
//!   workload that hardly remaps keeps physical memory at its peak; one that keeps remapping
//!   gets room to stop, trading at most the slack in memory for remapping. A workload whose
//!   misses show growth by concatenation (a KV-cache decode; see
//!   [`GrowthSignal`](super::growth_signal::GrowthSignal)) earns the slack from that
//!   evidence, sooner than by the ramp (`compact_slack_on_growth`): on the decode trace of
//!   `tools/synth_traces.py` the bytes mapped fall from 1.67x peak live (no slack) to 1.42x
//!   by the ramp alone and to 1.03x with the signal, for physical memory at 1.008x peak live
//!   instead of 1.001x.
//! - Recycling has a budget: the bytes mapped over the engine's life may reach
//!   [`CHURN_STOP`] times the peak of live memory plus `compact_recycle_rate` times the bytes
//!   requested so far. Over the last [`CHURN_RAMP`] peaks of that budget, physical memory may
//!   exceed the peak by up to [`SLACK_MAX`] before recycling starts; once the budget is
//!   spent, new memory is mapped. The budget grows with every request, so a workload whose
//!   live set keeps changing shape (a random mix) recycles at a bounded share of what it
//!   allocates instead of stopping for good.
//! - Under a cap or a device out-of-memory, every idle page may be recycled that way before
//!   the request fails (the retry chain), then every cached page is unmapped and freed and
//!   the request retried once more.

use super::expandable::candidate_rule as expandable_best_fit;
use super::growth_signal::GrowthSignal;
use super::{Growth, PlacementPolicy, Request, StateView};
use crate::engine::error::AllocError;
use crate::engine::free_index::FreeKey;
use crate::engine::page_layout::round_up_to_page;
use crate::engine::rounding::SegmentKind;
use crate::engine::segments::NoSegment;
use crate::engine::source::SegmentSource;
use crate::engine::state::EngineState;

/// Page of the large kind: small enough that the partly used pages at the ends of free
/// stretches waste little, large enough to keep binds few.
pub(crate) const LARGE_PAGE: u64 = 512 << 10;
/// Page of the small kind (blocks of up to 1 MiB).
pub(crate) const SMALL_PAGE: u64 = 64 << 10;
/// The fixed part of the recycling budget: bytes mapped over the engine's life, as a
/// multiple of the peak of live memory. Workloads whose live set keeps its shape (training,
/// serving) stay far below it.
const CHURN_STOP: f64 = 2.5;
/// The last part of the budget, in peaks of live memory, over which the slack grows by up
/// to [`SLACK_MAX`].
const CHURN_RAMP: f64 = 1.0;
/// How much the slack (a fraction of the peak of live memory) has grown at the end of the
/// budget.
const SLACK_MAX: f64 = 0.3;

/// A small miss's granule is at most this fraction of the peak of live memory, so that a
/// small pool is not rounded up to `compact_small_map_kb` steps.
const SMALL_MAP_SHARE: u64 = 512;

/// `found`, widened for a request of the small kind to map at least the small granule
/// (where the unmapped block has room): `compact_small_map_kb`, or the peak of live memory
/// over [`SMALL_MAP_SHARE`] if less, in whole pages. Small requests come many at a time and
/// each miss costs a search, a recycle and a bind; on ResNet training small requests were
/// 238 of 250 steady misses, each mapping one or two 64 KiB pages.
///
/// Only on a request's first attempt (`widen`), and only where the whole granule fits under
/// the cap: a request that its own pages would serve never fails for the widening, because
/// the retry chain maps exactly what it needs.
fn widened(state: StateView<'_>, kind: SegmentKind, found: Place, widen: bool) -> Place {
    let most = u64::from(state.config().compact_small_map_kb) << 10;
    if !widen || kind != SegmentKind::Small || found.needed >= most {
        return found;
    }
    let page = state.page_of(kind);
    let granule = (state.lifetime_requested_peak() / SMALL_MAP_SHARE).min(most) / page * page;
    let needed = granule.min(state.block_size(found.unmapped));
    if needed <= found.needed
        || state
            .cap()
            .is_some_and(|cap| state.physical().saturating_add(needed) > cap)
    {
        return found;
    }
    Place { needed, ..found }
}

/// How many unmapped blocks a miss compares, on each side of the request's size.
const SEARCH_DEPTH: usize = 8;

/// `policy:compact` in pages mode (the default policy there): compact placement in pages.
#[derive(Debug, Default)]
pub(crate) struct CompactPagesPolicy {
    /// The misses so far, as evidence of growth by concatenation.
    growth: GrowthSignal,
}

/// Where a missed request goes: from `start` (a free mapped block, or `unmapped` itself),
/// mapping the first `needed` bytes of `unmapped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    start: u32,
    unmapped: u32,
    needed: u64,
}

/// Whether `found` is still an unmapped block whose mapping serves `rounded` bytes: the same
/// free block (or none) below it, and room for the pages it needs.
fn still_holds(state: StateView<'_>, found: Place, kind: SegmentKind, rounded: u64) -> bool {
    let unmapped = found.unmapped;
    if !state.is_block_of(unmapped, kind)
        || !state.is_unmapped(unmapped)
        || state.block_size(unmapped) < found.needed
    {
        return false;
    }
    let below = if found.start == unmapped {
        0
    } else if state.prev(unmapped) == found.start && state.is_free_block(found.start) {
        state.block_size(found.start)
    } else {
        return false;
    };
    below + found.needed >= rounded
}

/// The place that maps the fewest new bytes for `rounded` bytes, the smallest run first;
/// `None` when no unmapped block of the kind and stream can hold it. Runs are a free mapped
/// block followed by an unmapped one (found from either side: unmapped blocks near the
/// request's size, and the largest free blocks below it that unmapped space follows), or an
/// unmapped block alone.
fn place(state: StateView<'_>, kind: SegmentKind, stream: u32, rounded: u64) -> Option<Place> {
    let page = state.page_of(kind);
    // The first place with the fewest bytes to map, then the smallest run, in the order
    // the searches offer them.
    let mut best: Option<(u64, u64, Place)> = None;
    let near = near_offers(state, kind, stream, rounded);
    for &unmapped in near.blocks() {
        keep_better(&mut best, consider(state, page, rounded, unmapped));
    }
    // Both searches ran out before their depth: every unmapped block of the kind and stream
    // was offered. The third search would offer some of them again, which changes nothing.
    if near.all {
        return best.map(|(_, _, place)| place);
    }
    // The unmapped blocks after the largest free blocks below the request. A run from a
    // free block of `below` bytes maps at least `rounded - below` bytes, more for each
    // smaller block: once that exceeds the best place's bytes to map, no later offer is
    // better, and the search stops.
    for key in state
        .free_blocks(kind)
        .below_descending(stream, rounded)
        .take(SEARCH_DEPTH)
    {
        if best.is_some_and(|b| rounded.saturating_sub(key.size) > b.0) {
            break;
        }
        let next = state.next(key.block);
        if state.is_unmapped_block(next) {
            keep_better(&mut best, consider(state, page, rounded, next));
        }
    }
    best.map(|(_, _, place)| place)
}

/// Makes `found` the best place if it maps fewer bytes, or as many in a smaller run: of
/// equal places, the first offered stays.
#[inline(always)]
fn keep_better(best: &mut Option<(u64, u64, Place)>, found: Option<(u64, u64, Place)>) {
    if let Some(found) = found
        && best.is_none_or(|b| (found.0, found.1) < (b.0, b.1))
    {
        *best = Some(found);
    }
}

/// The unmapped blocks near the request's size that a miss compares first, in the order
/// [`place`] weighs them: from the request's size up, then below it, each up to
/// [`SEARCH_DEPTH`] of them. Collected first and weighed in one loop, so that the weighing
/// is one piece of inline code.
struct NearOffers {
    blocks: [u32; 2 * SEARCH_DEPTH],
    len: usize,
    /// Both searches ran out before their depth: every unmapped block of the kind and
    /// stream is among the offers.
    all: bool,
}

impl NearOffers {
    #[inline(always)]
    fn push(&mut self, block: u32) {
        self.blocks[self.len] = block;
        self.len += 1;
    }

    fn blocks(&self) -> &[u32] {
        &self.blocks[..self.len]
    }
}

/// The first two searches of [`place`].
#[inline(always)]
fn near_offers(state: StateView<'_>, kind: SegmentKind, stream: u32, rounded: u64) -> NearOffers {
    let mut offers = NearOffers {
        blocks: [0; 2 * SEARCH_DEPTH],
        len: 0,
        all: false,
    };
    for key in state
        .unmapped_fits(kind, stream, rounded)
        .take(SEARCH_DEPTH)
    {
        offers.push(key.block);
    }
    let offered = offers.len;
    for key in state
        .unmapped_below(kind, stream, rounded)
        .take(SEARCH_DEPTH)
    {
        offers.push(key.block);
    }
    let offered_below = offers.len - offered;
    offers.all = offered < SEARCH_DEPTH && offered_below < SEARCH_DEPTH;
    offers
}

/// Unmapped block `unmapped` as a place for `rounded` bytes, with the free block below it if
/// any: (bytes to map, bytes of the run, place); `None` where the run cannot hold the
/// request, or the free block alone can (a free block that holds the request alone is the
/// cache's to give, or to refuse).
#[inline(always)]
fn consider(
    state: StateView<'_>,
    page: u64,
    rounded: u64,
    unmapped: u32,
) -> Option<(u64, u64, Place)> {
    let size = state.block_size(unmapped);
    let prev = state.prev(unmapped);
    let (start, below) = if state.is_free_block(prev) {
        (prev, state.block_size(prev))
    } else {
        (unmapped, 0)
    };
    if below + size < rounded || below >= rounded {
        return None;
    }
    let needed = round_up_to_page(rounded - below.min(rounded), page);
    let place = Place {
        start,
        unmapped,
        needed: needed.min(size),
    };
    Some((place.needed, below + size, place))
}

impl CompactPagesPolicy {
    /// The physical memory allowed before recycling, for this request; `None` once the
    /// recycling budget is spent. `growth` is the share of the slack that growth by
    /// concatenation has earned (0 to 1).
    fn limit(state: StateView<'_>, request: Request, growth: f64) -> Option<u64> {
        let live = state.requested_bytes() + request.requested;
        let peak = state.lifetime_requested_peak().max(live) as f64;
        let requested = (state.lifetime_requested_total() + request.requested) as f64;
        let budget = CHURN_STOP * peak + state.config().compact_recycle_rate * requested;
        let mapped = state.mapped_total() as f64;
        if mapped >= budget {
            return None;
        }
        let ramp = ((mapped - (budget - CHURN_RAMP * peak)) / (CHURN_RAMP * peak).max(1.0))
            .clamp(0.0, 1.0);
        // From 1x the peak mapped (nothing mapped twice) the slack grows in proportion, and
        // applies in full once `compact_slack_ramp` peaks more were mapped, or sooner as
        // growth by concatenation shows.
        let config = state.config();
        let remapped =
            ((mapped - peak) / (config.compact_slack_ramp * peak).max(1.0)).clamp(0.0, 1.0);
        let slack = config.compact_page_slack * remapped.max(growth);
        Some((peak * (1.0 + slack + ramp * SLACK_MAX)) as u64)
    }

    /// Finds a place, recycling idle pages first while mapping there would go over `limit`
    /// (no limit: recycle as much as the place needs), mapping a small request's granule
    /// where `widen` lets it ([`widened`]). Returns the place to map.
    fn prepare(
        engine: &mut Growth<'_>,
        request: Request,
        limit: Option<u64>,
        widen: bool,
        source: &mut dyn SegmentSource,
    ) -> Result<Place, NoSegment> {
        let Request {
            kind,
            stream,
            rounded,
            ..
        } = request;
        let placed = place(engine.view(), kind, stream, rounded);
        let found = match placed {
            Some(found) => found,
            None => Self::own_range(engine, request, source)?,
        };
        let found = widened(engine.view(), kind, found, widen);
        let spare = engine.view().spare_bytes();
        let after = engine.view().physical() + found.needed.saturating_sub(spare);
        let over = match limit {
            Some(limit) => after.saturating_sub(limit),
            None => found.needed.saturating_sub(spare),
        };
        if over == 0 {
            return Ok(found);
        }
        let keep = [found.start, found.unmapped];
        let recycled = engine
            .recycle_idle(over, keep, Some((kind, stream)), source)
            .map_err(NoSegment::Source)?;
        if recycled.bytes == 0 {
            return Ok(found);
        }
        // Where no page of the request's kind and stream was unmapped, the search would look
        // at the same blocks as before and find the same place.
        if !recycled.near && placed.is_some() {
            debug_assert_eq!(place(engine.view(), kind, stream, rounded), placed);
            return Ok(found);
        }
        // Unmapping may have joined or released blocks around the place: look again. Where
        // nothing qualifies now (the recycled pages joined free memory into a block that
        // holds the request alone), the first place is used only if it still stands as it
        // was; otherwise the request gets a range of its own.
        if let Some(again) = place(engine.view(), kind, stream, rounded) {
            return Ok(widened(engine.view(), kind, again, widen));
        }
        if still_holds(engine.view(), found, kind, rounded) {
            return Ok(found);
        }
        let found = Self::own_range(engine, request, source)?;
        Ok(widened(engine.view(), kind, found, widen))
    }

    /// A new range for the request: the place that maps its own pages at the range's start.
    fn own_range(
        engine: &mut Growth<'_>,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<Place, NoSegment> {
        let unmapped =
            engine.reserve_range(request.kind, request.stream, request.rounded, source)?;
        let page = engine.view().page_of(request.kind);
        Ok(Place {
            start: unmapped,
            unmapped,
            needed: round_up_to_page(request.rounded, page),
        })
    }

    /// Maps a prepared place and returns the free block that holds the request, out of the
    /// free index.
    fn map(
        engine: &mut Growth<'_>,
        request: Request,
        found: Place,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let block = engine.map_front_to_take(found.unmapped, found.needed, source)?;
        debug_assert!(engine.view().block_size(block) >= request.rounded);
        Ok(block)
    }

    /// One attempt: place, recycle under `limit`, map (a small request's granule where
    /// `widen` lets it).
    fn attempt(
        engine: &mut Growth<'_>,
        request: Request,
        limit: Option<u64>,
        widen: bool,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        let mapped = Self::prepare(engine, request, limit, widen, source)
            .and_then(|found| Self::map(engine, request, found, source));
        // Memory recycled beyond what was mapped goes back to the device.
        engine.release_spare(source);
        mapped
    }
}

impl PlacementPolicy for CompactPagesPolicy {
    #[inline]
    fn candidate(
        &mut self,
        state: StateView<'_>,
        kind: SegmentKind,
        stream: u32,
        rounded: u64,
    ) -> Option<FreeKey> {
        expandable_best_fit(state, kind, stream, rounded)
    }

    fn grow(
        &mut self,
        engine: &mut Growth<'_>,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, AllocError> {
        let growth = if engine.view().config().compact_slack_on_growth {
            self.growth.miss(request.rounded);
            self.growth.earned()
        } else {
            0.0
        };
        let limit = Self::limit(engine.view(), request, growth).unwrap_or(u64::MAX);
        match Self::attempt(engine, request, Some(limit), true, source) {
            Ok(block) => return Ok(block),
            Err(failure) => {
                EngineState::classify(failure)?;
            }
        }
        // The retry chain: recycle every idle page the request needs, then unmap and free
        // everything cached.
        match Self::attempt(engine, request, None, false, source) {
            Ok(block) => return Ok(block),
            Err(failure) => {
                EngineState::classify(failure)?;
            }
        }
        engine
            .unmap_all_idle(true, source)
            .map_err(AllocError::Source)?;
        engine.count_retry();
        match Self::attempt(engine, request, None, false, source) {
            Ok(block) => Ok(block),
            Err(failure) => {
                let cause = EngineState::classify(failure)?;
                let page = engine.view().page_of(request.kind);
                let size = round_up_to_page(request.rounded, page);
                Err(engine.out_of_memory(request, size, cause))
            }
        }
    }
}
