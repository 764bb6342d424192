//! `policy:pytorch`: PyTorch's native CUDA caching allocator, rule for rule.

use super::{Growth, PlacementPolicy, Request, StateView};
use crate::engine::error::AllocError;
use crate::engine::free_index::FreeKey;
use crate::engine::rounding::{SegmentKind, segment_size_for};
use crate::engine::source::SegmentSource;

/// PyTorch's `get_free_block` and `get_allocation_size`.
#[derive(Debug, Default)]
pub(crate) struct PytorchPolicy;

/// Best fit by (stream, size, address), with the two oversize rules of `max_split_size_mb`.
pub(crate) fn best_fit(
    state: StateView<'_>,
    kind: SegmentKind,
    stream: u32,
    rounded: u64,
) -> Option<FreeKey> {
    let key = state.free_blocks(kind).best_fit(stream, rounded)?;
    state
        .passes_oversize_rules(key.size, rounded)
        .then_some(key)
}

impl PlacementPolicy for PytorchPolicy {
    #[inline]
    fn candidate(
        &mut self,
        state: StateView<'_>,
        kind: SegmentKind,
        stream: u32,
        rounded: u64,
    ) -> Option<FreeKey> {
        best_fit(state, kind, stream, rounded)
    }

    fn grow(
        &mut self,
        engine: &mut Growth<'_>,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, AllocError> {
        let size = segment_size_for(engine.view().config(), request.rounded);
        engine.grow_segments(request, size, source, &mut |_, _, _| {})
    }
}
