//! `policy:pytorch`: PyTorch's native CUDA caching allocator, rule for rule.

use super::{PlacementPolicy, Request};
use crate::engine::error::AllocError;
use crate::engine::free_index::FreeKey;
use crate::engine::rounding::{SegmentKind, segment_size_for};
use crate::engine::source::SegmentSource;
use crate::engine::state::EngineState;

/// PyTorch's `get_free_block` and `get_allocation_size`.
#[derive(Debug, Default)]
pub(crate) struct PytorchPolicy;

/// Best fit by (stream, size, address), with the two oversize rules of `max_split_size_mb`.
pub(crate) fn best_fit(
    state: &EngineState,
    kind: SegmentKind,
    stream: u32,
    rounded: u64,
) -> Option<FreeKey> {
    let key = state.free_index[kind.index()].best_fit(stream, rounded)?;
    state
        .passes_oversize_rules(key.size, rounded)
        .then_some(key)
}

impl PlacementPolicy for PytorchPolicy {
    #[inline]
    fn candidate(
        &mut self,
        state: &EngineState,
        kind: SegmentKind,
        stream: u32,
        rounded: u64,
    ) -> Option<FreeKey> {
        best_fit(state, kind, stream, rounded)
    }

    fn grow(
        &mut self,
        state: &mut EngineState,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, AllocError> {
        let size = segment_size_for(&state.config, request.rounded);
        state.grow_segments(request, size, source, &mut |_, _, _| {})
    }
}
