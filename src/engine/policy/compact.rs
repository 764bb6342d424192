//! The `compact` policy: PyTorch's rules plus wgpool's own, aimed at the fragmentation that
//! training and serving workloads actually show.
//!
//! What fragments a caching allocator without virtual memory is *pinning*: a small block
//! carved out of a large cached segment keeps the whole segment from serving the large
//! request it was made for (the next step's logits, say), so that request needs a new
//! segment while the old one sits mostly free. PyTorch's best fit does exactly that whenever
//! the large segment is the smallest free block that fits.
//!
//! 1. **Keep large cached segments whole for large requests, while growing is cheap.** A
//!    request may take a free block that spans a whole segment if it fills at least
//!    `compact_min_share` of it (default 1/16) or leaves at most [`SMALL_LEFTOVER`] unused.
//!    Otherwise the request gets a segment of its own, but only if that fits under the slack
//!    (below), after whatever releases the budget still allows; if it does not, the request
//!    takes the best-fitting block as in PyTorch, since splitting beats growing the pool.
//!    Free blocks inside already-split segments are always taken best-fit.
//! 2. **Release idle segments instead of growing past the live peak.** Before a new segment
//!    would take reserved memory more than `compact_reserved_slack` (default 4%) above the
//!    peak of allocated memory, cached whole segments are released, least recently freed
//!    first. Re-creating released segments costs time (about 17.5 ms per GiB on an H200 for
//!    buffers of 256 MiB and more), so the bytes released over the pool's life are capped at
//!    `compact_release_budget` (default 0.25) times the allocated peak plus
//!    `compact_recycle_rate` (default 0.1) times every byte requested so far; the budget
//!    grows with the peak and with the work done, so that a workload whose live set keeps
//!    changing shape keeps releasing at a bounded share of what it allocates. Once it is
//!    spent the pool grows instead.
//!
//!    One exception: where rule 1 refuses every idle segment and a segment of the request's
//!    own would need a release, the request shares an idle segment instead, the smallest
//!    that still has room beside it for the block it last served, as long as another idle
//!    segment at least as large stays whole (`idle_twin_to_share`). A decode loop otherwise
//!    releases an idle segment each step to make room for a small one and creates it again
//!    for the next step's large request. `compact_share_idle:False` turns this off.
//! 3. **Round segments up while shapes drift.** A request of [`DRIFT_MIN_SIZE`] or more that
//!    misses while an idle whole segment of at least 3/4 of its size is cached (varying
//!    sequence lengths, say) gets a segment rounded up to the next quarter step between
//!    powers of two, so that the next, slightly larger request of its kind fits in it.
//!    Fixed shapes never trigger this.
//!
//! On `shared/traces/gpt2-train.csv` this gives peak reserved / peak live = 1.029 with
//! segment bytes created = 1.13 x peak live, against PyTorch's 1.082 at 1.08 x; docs/POLICY.md
//! has the measurements on other workloads.

use super::pytorch::best_fit;
use super::{Growth, PlacementPolicy, Request, StateView};
use crate::engine::error::AllocError;
use crate::engine::free_index::FreeKey;
use crate::engine::rounding::{
    ROUND_LARGE, SegmentKind, round_to_power2_division, segment_size_for,
};
use crate::engine::source::SegmentSource;

/// A whole cached segment serves any request that leaves at most this many bytes of it
/// unused, whatever its share.
pub const SMALL_LEFTOVER: u64 = 64 << 20;
/// Requests from this size up get drift-rounded segments.
pub const DRIFT_MIN_SIZE: u64 = 64 << 20;
/// Drift-rounded segments take the next of this many steps between powers of two.
const DRIFT_DIVISIONS: u32 = 4;
/// How many free blocks, smallest first, a search looks at for one it may take.
const SEARCH_DEPTH: usize = 8;

/// The compact policy, and what it remembers between calls.
#[derive(Debug, Default)]
pub(crate) struct CompactPolicy {
    /// Bytes of segments released to stay under the slack.
    released: u64,
}

/// Whether a request of `rounded` bytes may take free block `key` without further thought.
fn may_take(state: StateView<'_>, key: &FreeKey, rounded: u64) -> bool {
    state.is_split(key.block)
        || key.size - rounded <= SMALL_LEFTOVER
        || rounded as f64 >= key.size as f64 * state.config().compact_min_share
}

/// The free block that serves a request, if any. The small kind and the oversize rules of
/// `max_split_size_mb` behave as in PyTorch.
fn candidate(
    state: StateView<'_>,
    released: u64,
    kind: SegmentKind,
    stream: u32,
    rounded: u64,
) -> Option<FreeKey> {
    if kind == SegmentKind::Small {
        return best_fit(state, kind, stream, rounded);
    }
    let index = state.free_blocks(kind);
    let allowed = index
        .fits_ascending(stream, rounded)
        .take(SEARCH_DEPTH)
        .find(|key| may_take(state, key, rounded));
    let key = match allowed.or_else(|| idle_twin_to_share(state, stream, rounded)) {
        Some(key) => key,
        None => {
            let best = index.best_fit(stream, rounded)?;
            if can_grow_within_slack(state, released, stream, rounded) {
                return None;
            }
            best
        }
    };
    state
        .passes_oversize_rules(key.size, rounded)
        .then_some(key)
}

/// Rule 2's exception: the idle segment a request shares when rule 1 refused every idle
/// segment and a segment of its own would not fit under the slack without a release. It is
/// the smallest idle large segment on the request's stream that still has room, beside the
/// request, for the block it last served, and only while another idle segment on the stream
/// at least as large stays whole for the largest requests. None where growing needs no release, and
/// with `compact_share_idle:False`.
///
/// On a KV-cache decode this takes the segments created from 2.7x to 1.4x the live peak,
/// and peak reserved from 1.066x to 1.040x (docs/POLICY.md, "Sharing an idle segment").
fn idle_twin_to_share(state: StateView<'_>, stream: u32, rounded: u64) -> Option<FreeKey> {
    if !state.config().compact_share_idle {
        return None;
    }
    let segment = segment_size(state, stream, rounded).min(state.max_segment_size());
    let (limit, _) = reserved_limit(state, rounded);
    if state.reserved() + segment <= limit {
        return None;
    }
    let shared = state
        .idle_segment_blocks()
        .filter(|idle| {
            idle.kind == SegmentKind::Large
                && idle.stream == stream
                && idle.size >= rounded
                && idle.size - rounded >= idle.last_use
                && state.passes_oversize_rules(idle.size, rounded)
        })
        .min_by_key(|idle| (idle.size, idle.block))?;
    let twin = state.idle_segment_blocks().any(|idle| {
        idle.block != shared.block
            && idle.kind == SegmentKind::Large
            && idle.stream == stream
            && idle.size >= shared.size
    });
    twin.then(|| state.free_block_key(shared.block))
}

/// The reserved-memory limit for a request of `rounded` bytes, and the allocated peak it is
/// derived from (this request included).
fn reserved_limit(state: StateView<'_>, rounded: u64) -> (u64, u64) {
    let peak = state
        .lifetime_allocated_peak()
        .max(state.allocated_bytes() + rounded);
    let limit = (peak as f64 * (1.0 + state.config().compact_reserved_slack)) as u64;
    (limit, peak)
}

/// The release budget left for an allocated peak of `peak` bytes, of which `released` were
/// spent: `compact_release_budget` times the peak, plus `compact_recycle_rate` times every
/// byte requested so far.
fn budget_left(state: StateView<'_>, released: u64, peak: u64) -> u64 {
    let config = state.config();
    let budget = peak as f64 * config.compact_release_budget
        + state.lifetime_requested_total() as f64 * config.compact_recycle_rate;
    (budget as u64).saturating_sub(released)
}

/// Whether a new segment for `rounded` bytes fits under the limit, possibly after releasing
/// idle whole segments, smallest first, within the remaining release budget.
fn can_grow_within_slack(state: StateView<'_>, released: u64, stream: u32, rounded: u64) -> bool {
    let segment = segment_size(state, stream, rounded).min(state.max_segment_size());
    let (limit, peak) = reserved_limit(state, rounded);
    let reserved = state.reserved();
    if reserved + segment <= limit {
        return true;
    }
    let mut left = budget_left(state, released, peak);
    let mut idle: Vec<u64> = state.idle_segment_blocks().map(|idle| idle.size).collect();
    idle.sort_unstable();
    let mut freed = 0u64;
    for size in idle {
        if size > left {
            break;
        }
        left -= size;
        freed += size;
        if reserved - freed + segment <= limit {
            return true;
        }
    }
    false
}

/// The size of a new segment on `stream`: PyTorch's, or drift-rounded (rule 3).
fn segment_size(state: StateView<'_>, stream: u32, rounded: u64) -> u64 {
    let base = segment_size_for(state.config(), rounded);
    if rounded < DRIFT_MIN_SIZE {
        return base;
    }
    let nearly = rounded - rounded / 4;
    let drifting = state
        .free_blocks(SegmentKind::Large)
        .fits_ascending(stream, nearly)
        .take_while(|key| key.size < rounded)
        .any(|key| !state.is_split(key.block));
    if !drifting {
        return base;
    }
    let stepped = round_to_power2_division(rounded, DRIFT_DIVISIONS);
    stepped.div_ceil(ROUND_LARGE) * ROUND_LARGE
}

impl PlacementPolicy for CompactPolicy {
    fn candidate(
        &mut self,
        state: StateView<'_>,
        kind: SegmentKind,
        stream: u32,
        rounded: u64,
    ) -> Option<FreeKey> {
        candidate(state, self.released, kind, stream, rounded)
    }

    fn grow(
        &mut self,
        engine: &mut Growth<'_>,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, AllocError> {
        let state = engine.view();
        let mut size = segment_size(state, request.stream, request.rounded);
        if let Some(cap) = state.cap() {
            let reserved = state.reserved();
            if reserved.saturating_add(size) > cap {
                // Rule 4: under a cap, a segment larger than the request that would not fit
                // is cut down to the request (in 2 MiB steps): an 8 MiB request under a
                // 16 MiB cap gets an 8 MiB segment, not a failed 20 MiB one.
                let fitted = request.rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE;
                if fitted < size && reserved.saturating_add(fitted) <= cap {
                    size = fitted;
                } else if request.kind == SegmentKind::Small {
                    // ... and a small request that gets no small segment takes free room in
                    // a large segment before it fails (or spills to host memory).
                    let large = state.free_blocks(SegmentKind::Large);
                    if let Some(key) = large.best_fit(request.stream, request.rounded) {
                        return Ok(engine.take_free_block(key.block));
                    }
                }
            }
        }
        engine.grow_segments(request, size, source, &mut |engine, size, source| {
            self.make_room(engine, request.rounded, size, source)
        })
    }
}

impl CompactPolicy {
    /// Releases cached whole segments, least recently freed first, until a new segment of
    /// `segment_size` bytes fits under the slack, or the release budget is spent.
    fn make_room(
        &mut self,
        engine: &mut Growth<'_>,
        rounded: u64,
        segment_size: u64,
        source: &mut dyn SegmentSource,
    ) {
        let state = engine.view();
        let (limit, peak) = reserved_limit(state, rounded);
        if state.reserved() + segment_size <= limit {
            return;
        }
        let mut left = budget_left(state, self.released, peak);
        let idle: Vec<(u32, u64)> = state
            .idle_segment_blocks()
            .map(|idle| (idle.block, idle.size))
            .collect();
        for (block, size) in idle {
            if engine.view().reserved() + segment_size <= limit {
                break;
            }
            if size > left {
                continue;
            }
            left -= size;
            self.released += size;
            engine.release_block(block, source);
        }
    }
}
