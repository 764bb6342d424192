//! The `compact` policy: wgpool's own placement rules.

use super::free_index::FreeKey;
use super::rounding::segment_size_for;
use super::{Engine, PoolKind, SegmentSource};

/// State the compact policy keeps between calls.
#[derive(Debug, Default)]
pub(crate) struct CompactState {}

pub(super) fn candidate(
    engine: &Engine,
    pool: PoolKind,
    stream: u32,
    rounded: u64,
) -> Option<FreeKey> {
    engine.free_index[pool.index()].best_fit(stream, rounded)
}

pub(super) fn segment_size(engine: &Engine, rounded: u64) -> u64 {
    segment_size_for(&engine.config, rounded)
}

pub(super) fn before_new_segment<S: SegmentSource + ?Sized>(
    _engine: &mut Engine,
    _pool: PoolKind,
    _stream: u32,
    _rounded: u64,
    _source: &mut S,
) {
}

pub(super) fn after_free<S: SegmentSource + ?Sized>(
    _engine: &mut Engine,
    _block: u32,
    _source: &mut S,
) {
}
