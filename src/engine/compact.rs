//! The `compact` policy: PyTorch's rules plus two of wgpool's own, aimed at the
//! fragmentation that training and serving workloads actually show.
//!
//! What fragments a caching allocator without virtual memory is *pinning*: a small block
//! carved out of a large cached segment keeps the whole segment from serving the large
//! request it was made for (the next step's logits, say), so that request needs a new
//! segment while the old one sits mostly free. PyTorch's best fit does exactly that whenever
//! the large segment is the smallest free block that fits.
//!
//! 1. **Keep large cached segments whole for large requests.** A request may take a free
//!    block that spans a whole segment only if it uses at least `compact_min_share` of it
//!    (default 1/8) or would leave at most [`SMALL_LEFTOVER`] unused. Free blocks inside
//!    already-split segments are taken best-fit as in PyTorch.
//! 2. **Release idle segments instead of growing past the live peak.** Before a new segment
//!    would take reserved memory more than `compact_reserved_slack` (default 3%) above the
//!    peak of allocated memory, cached whole segments are released, least recently freed
//!    first. Re-creating released segments costs time (about 17.5 ms per GiB on an H200 for
//!    buffers of 256 MiB and more), so the bytes released over the pool's life are capped at
//!    `compact_release_budget` (default 0.2) times the allocated peak; the budget grows with
//!    the peak. Once it is spent the pool grows instead.
//!
//! On `shared/traces/gpt2-train.csv` this gives peak reserved / peak live = 1.029 with
//! segment bytes created = 1.13 x peak live, against PyTorch's 1.082 at 1.08 x.

use super::free_index::FreeKey;
use super::rounding::segment_size_for;
use super::{Engine, PoolKind, SegmentSource};

/// A whole cached segment serves any request that leaves at most this many bytes of it
/// unused, whatever its share.
pub const SMALL_LEFTOVER: u64 = 64 << 20;
/// How many free blocks, smallest first, a search looks at for one it may take.
const SEARCH_DEPTH: usize = 8;

/// What the compact policy remembers between calls.
#[derive(Debug, Default)]
pub(crate) struct CompactState {
    /// Peak of allocated bytes over the engine's life (not reset by `reset_peak_stats`).
    allocated_peak: u64,
    /// Bytes of segments released to stay under the slack.
    released: u64,
}

/// Whether a request of `rounded` bytes may take free block `key`.
fn may_take(engine: &Engine, key: &FreeKey, rounded: u64) -> bool {
    engine.is_split(key.block)
        || key.size - rounded <= SMALL_LEFTOVER
        || rounded as f64 >= key.size as f64 * engine.config.compact_min_share
}

/// The free block that serves a request, if any. The small pool and the oversize rules of
/// `max_split_size_mb` behave as in PyTorch.
pub(super) fn candidate(
    engine: &Engine,
    pool: PoolKind,
    stream: u32,
    rounded: u64,
) -> Option<FreeKey> {
    if pool == PoolKind::Small {
        return engine.pytorch_candidate(pool, stream, rounded);
    }
    let key = engine.free_index[pool.index()]
        .fits_ascending(stream, rounded)
        .take(SEARCH_DEPTH)
        .find(|key| may_take(engine, key, rounded))?;
    engine
        .passes_oversize_rules(key.size, rounded)
        .then_some(key)
}

/// New segments are sized as PyTorch sizes them.
pub(super) fn segment_size(engine: &Engine, rounded: u64) -> u64 {
    segment_size_for(&engine.config, rounded)
}

/// Releases cached whole segments, least recently freed first, until a new segment of
/// `segment_size` bytes fits under the slack, or the release budget is spent.
pub(super) fn make_room<S: SegmentSource + ?Sized>(
    engine: &mut Engine,
    rounded: u64,
    segment_size: u64,
    source: &mut S,
) {
    let peak = engine
        .compact
        .allocated_peak
        .max(engine.stats.allocated_bytes.all.current + rounded);
    let limit = (peak as f64 * (1.0 + engine.config.compact_reserved_slack)) as u64;
    let budget = (peak as f64 * engine.config.compact_release_budget) as u64;
    if engine.stats.reserved_bytes.all.current + segment_size <= limit {
        return;
    }
    let mut idle: Vec<(u64, u32, u64)> = [PoolKind::Large, PoolKind::Small]
        .iter()
        .flat_map(|pool| engine.free_index[pool.index()].iter())
        .filter(|key| !engine.is_split(key.block))
        .map(|key| {
            (
                engine.blocks[key.block as usize].freed_at,
                key.block,
                key.size,
            )
        })
        .collect();
    idle.sort_unstable();
    for (_, block, size) in idle {
        if engine.stats.reserved_bytes.all.current + segment_size <= limit {
            break;
        }
        if engine.compact.released + size > budget {
            continue;
        }
        engine.compact.released += size;
        engine.release_block(block, source);
    }
}

/// Tracks the allocated peak after each allocation.
pub(super) fn after_allocate(engine: &mut Engine) {
    let allocated = engine.stats.allocated_bytes.all.current;
    engine.compact.allocated_peak = engine.compact.allocated_peak.max(allocated);
}
