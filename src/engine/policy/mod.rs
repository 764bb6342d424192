//! Placement policies: which free block serves a request, and how the engine grows when none
//! does.
//!
//! The engine owns the layout (`EngineState`) and every change to it; a policy reads the
//! layout through a [`StateView`], decides, and asks the engine for the changes through
//! [`Growth`], whose methods are the engine's own paths. In segments mode,
//! `policy:pytorch` is PyTorch's native allocator rule for rule, `policy:compact` adds
//! wgpool's rules against fragmentation, and `backend:passthrough` gives every request a
//! segment of its own. In pages mode, `policy:pytorch` is PyTorch's expandable segments
//! (`expandable`) and `policy:compact` recycles idle pages under a slack (`compact_pages`).

mod compact;
mod compact_pages;
mod expandable;
mod growth_signal;
mod passthrough;
mod pytorch;
mod view;

use super::error::AllocError;
use super::free_index::FreeKey;
use super::rounding::SegmentKind;
use super::source::SegmentSource;
use crate::config::{Caching, Config, Policy};

use compact::CompactPolicy;
use compact_pages::CompactPagesPolicy;
use expandable::ExpandablePolicy;

/// Page sizes of the compact policy in pages mode: (small kind, large kind).
pub(crate) const COMPACT_PAGES: (u64, u64) = (compact_pages::SMALL_PAGE, compact_pages::LARGE_PAGE);
use passthrough::PassthroughPolicy;
use pytorch::PytorchPolicy;
pub(crate) use view::{Growth, StateView};

/// A request that missed the cache.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    pub kind: SegmentKind,
    pub stream: u32,
    /// The caller's size.
    pub requested: u64,
    /// The size it is served with.
    pub rounded: u64,
}

/// The decisions that differ between policies.
pub(crate) trait PlacementPolicy: std::fmt::Debug + Send + Sync {
    /// The free block that serves a request of `rounded` bytes on `stream`, if any. The
    /// engine removes it from the free index and takes it.
    fn candidate(
        &mut self,
        state: StateView<'_>,
        kind: SegmentKind,
        stream: u32,
        rounded: u64,
    ) -> Option<FreeKey>;

    /// Makes a free block (not in the free index) for a request no free block served: new
    /// memory, after whatever the policy releases or recycles, down the retry chain.
    ///
    /// # Errors
    ///
    /// [`AllocError::OutOfMemory`] after the whole chain, [`AllocError::Source`] at once for
    /// a source error other than out-of-memory.
    fn grow(
        &mut self,
        engine: &mut Growth<'_>,
        request: Request,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, AllocError>;

    /// Whether a freed block's segment is released at once.
    fn release_on_free(&self) -> bool {
        false
    }
}

/// The policy a configuration asks for, in pages mode or with fixed segments.
pub(crate) fn for_config(config: &Config, pages_mode: bool) -> Box<dyn PlacementPolicy> {
    match (config.backend, config.policy, pages_mode) {
        (Caching::Passthrough, _, _) => Box::new(PassthroughPolicy),
        (Caching::Native, Policy::Pytorch, false) => Box::new(PytorchPolicy),
        (Caching::Native, Policy::Compact, false) => Box::new(CompactPolicy::default()),
        (Caching::Native, Policy::Pytorch, true) => Box::new(ExpandablePolicy),
        (Caching::Native, Policy::Compact, true) => Box::new(CompactPagesPolicy::default()),
    }
}
