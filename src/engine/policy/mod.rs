//! Placement policies: which free block serves a request, how large a new segment is, and
//! what is released before the engine grows.
//!
//! The engine owns the layout ([`EngineState`]) and every change to it; a policy reads the
//! layout and decides. `policy:pytorch` is PyTorch's native allocator rule for rule,
//! `policy:compact` adds wgpool's rules against fragmentation, and `backend:passthrough`
//! gives every request a segment of its own.

mod compact;
mod passthrough;
mod pytorch;

use super::free_index::FreeKey;
use super::rounding::SegmentKind;
use super::source::SegmentSource;
use super::state::EngineState;
use crate::config::{Caching, Config, Policy};

pub(crate) use compact::CompactPolicy;
pub(crate) use passthrough::PassthroughPolicy;
pub(crate) use pytorch::PytorchPolicy;

/// The decisions that differ between policies.
pub(crate) trait PlacementPolicy: std::fmt::Debug + Send + Sync {
    /// The free block that serves a request of `rounded` bytes on `stream`, if any. The
    /// engine removes it from the free index and takes it.
    fn candidate(
        &self,
        state: &EngineState,
        kind: SegmentKind,
        stream: u32,
        rounded: u64,
    ) -> Option<FreeKey>;

    /// The size of a new segment for a request of `rounded` bytes on `stream`, before the
    /// engine bounds it by the largest segment.
    fn segment_size(&self, state: &EngineState, stream: u32, rounded: u64) -> u64;

    /// Called on a miss before a new segment of `segment_size` bytes is created: a policy may
    /// release cached segments here.
    fn make_room(
        &mut self,
        _state: &mut EngineState,
        _rounded: u64,
        _segment_size: u64,
        _source: &mut dyn SegmentSource,
    ) {
    }

    /// Whether a freed block's segment is released at once.
    fn release_on_free(&self) -> bool {
        false
    }
}

/// The policy a configuration asks for.
pub(crate) fn for_config(config: &Config) -> Box<dyn PlacementPolicy> {
    match (config.backend, config.policy) {
        (Caching::Passthrough, _) => Box::new(PassthroughPolicy),
        (Caching::Native, Policy::Pytorch) => Box::new(PytorchPolicy),
        (Caching::Native, Policy::Compact) => Box::new(CompactPolicy::default()),
    }
}
