//! The memory behind an engine checked against it: every segment has a live buffer of its
//! size; in pages mode, every range has its buffer and every live block lies on mapped
//! pages. The engine's own invariants are checked first.

use super::backing::{Backing, Source};
use super::host_tier::HostTier;
use super::segments::SegmentBuffers;
use crate::engine::Engine;
use crate::gpu::sparse::PagedMemory;

impl Backing {
    /// Checks `engine`'s invariants and that this memory backs its segments or ranges (see
    /// the module documentation).
    ///
    /// # Errors
    ///
    /// A description of the first inconsistency found.
    pub fn check(&self, engine: &Engine) -> Result<(), String> {
        match &self.source {
            Source::Segments(segments) => check_segments(engine, segments),
            Source::Pages(pages) => check_pages(engine, pages.memory()),
        }
    }
}

impl HostTier {
    /// Checks the host engine's invariants and that every host segment has its buffer.
    ///
    /// # Errors
    ///
    /// A description of the first inconsistency found.
    pub fn check(&self) -> Result<(), String> {
        check_segments(&self.engine, &self.segments)
    }
}

/// Checks one engine's invariants and that every segment has a buffer of its size.
fn check_segments(engine: &Engine, segments: &SegmentBuffers) -> Result<(), String> {
    engine.check_invariants()?;
    for segment in engine.snapshot() {
        let buffer = segments.buffer(segment.id);
        if buffer.size() != segment.size {
            return Err(format!(
                "segment {} has {} bytes but its buffer {}",
                segment.id.0,
                segment.size,
                buffer.size()
            ));
        }
    }
    let live = segments.live_buffers();
    let count = engine.memory_stats().segment.all.current as usize;
    if live != count {
        return Err(format!("{live} segment buffers exist for {count} segments"));
    }
    Ok(())
}

/// Checks the engine's invariants, that every range has a buffer of its size and that every
/// live block lies on mapped pages.
fn check_pages(engine: &Engine, pages: &PagedMemory) -> Result<(), String> {
    engine.check_invariants()?;
    for range in engine.snapshot() {
        let Some(buffer) = pages.buffer(range.id.0) else {
            return Err(format!("range {} has no buffer", range.id.0));
        };
        if buffer.size() < range.size {
            return Err(format!(
                "range {} has {} bytes but its buffer {}",
                range.id.0,
                range.size,
                buffer.size()
            ));
        }
        for block in range.blocks.iter().filter(|b| b.allocated) {
            if !pages.is_mapped(range.id.0, block.offset, block.size) {
                return Err(format!(
                    "the live block at {}+{} of range {} lies on unmapped pages",
                    block.offset, block.size, range.id.0
                ));
            }
        }
    }
    Ok(())
}
