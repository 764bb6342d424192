//! `check_consistency`: the engine's invariants plus the memory behind its segments.

use super::Pool;
use super::consistency_error::ConsistencyError;
use crate::engine::Engine;
use crate::memory::{Backing, SegmentBuffers};

impl Pool {
    /// Checks the engine's invariants (statistics equal a recount, blocks tile their
    /// segments) and the memory behind them, for device and host memory: every segment has
    /// a live buffer of its size; in pages mode, every range has its buffer and every live
    /// block lies on mapped pages. For tests and for debugging an application; it walks every
    /// block.
    ///
    /// # Errors
    ///
    /// [`ConsistencyError`]: the first inconsistency found, in the device memory or (as
    /// [`ConsistencyError::Host`]) in the host memory.
    pub fn check_consistency(&self) -> Result<(), ConsistencyError> {
        let state = self.shared.lock_flushed();
        match state.memory.segments() {
            Some(segments) => check_tier(&state.engine, segments)?,
            None => check_pages(&state.engine, &state.memory)?,
        }
        if let Some(host) = &state.host {
            check_tier(&host.engine, &host.segments)
                .map_err(|e| ConsistencyError::Host(Box::new(e)))?;
        }
        Ok(())
    }
}

/// Checks one engine's invariants and that every segment has a buffer of its size.
fn check_tier(engine: &Engine, segments: &SegmentBuffers) -> Result<(), ConsistencyError> {
    engine.check_invariants()?;
    for segment in engine.snapshot() {
        let buffer = segments.buffer(segment.id);
        if buffer.size() != segment.size {
            return Err(ConsistencyError::SegmentBufferSize {
                segment: segment.id.0,
                size: segment.size,
                buffer: buffer.size(),
            });
        }
    }
    let live = segments.live_buffers();
    let count = engine.memory_stats().segment.all.current as usize;
    if live != count {
        return Err(ConsistencyError::SegmentBufferCount {
            buffers: live,
            segments: count,
        });
    }
    Ok(())
}

/// Checks the engine's invariants, that every range has a buffer of its size and that every
/// live block lies on mapped pages.
fn check_pages(engine: &Engine, pages: &Backing) -> Result<(), ConsistencyError> {
    engine.check_invariants()?;
    for range in engine.snapshot() {
        let Some(buffer) = pages.range_buffer(range.id.0) else {
            return Err(ConsistencyError::RangeWithoutBuffer { range: range.id.0 });
        };
        if buffer.size() < range.size {
            return Err(ConsistencyError::RangeBufferSize {
                range: range.id.0,
                size: range.size,
                buffer: buffer.size(),
            });
        }
        for block in range.blocks.iter().filter(|b| b.allocated) {
            if !pages.is_mapped(range.id.0, block.offset, block.size) {
                return Err(ConsistencyError::UnmappedBlock {
                    range: range.id.0,
                    offset: block.offset,
                    size: block.size,
                });
            }
        }
    }
    Ok(())
}
