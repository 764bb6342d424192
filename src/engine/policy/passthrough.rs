//! `backend:passthrough`: one segment per request, released at free; no caching (like
//! `PYTORCH_NO_CUDA_MEMORY_CACHING=1`).

use super::{Growth, PlacementPolicy, Request, StateView};
use crate::engine::error::AllocError;
use crate::engine::free_index::FreeKey;
use crate::engine::rounding::SegmentKind;
use crate::engine::source::SegmentSource;

/// Never reuses a block; every segment is exactly its request, rounded.
#[derive(Debug, Default)]
pub(crate) struct PassthroughPolicy;

impl PlacementPolicy for PassthroughPolicy {
    fn candidate(&mut self, _: StateView<'_>, _: SegmentKind, _: u32, _: u64) -> Option<FreeKey> {
        None
    }

    fn grow(
        &mut self,
        engine: &mut Growth<'_>,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, AllocError> {
        engine.grow_segments(request, request.rounded, source, &mut |_, _, _| {})
    }

    fn release_on_free(&self) -> bool {
        true
    }
}
