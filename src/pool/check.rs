//! `check_consistency`: the engine's invariants plus the buffers behind its segments.

use super::Pool;
use super::device_segments::DeviceSegments;
use crate::engine::Engine;

impl Pool {
    /// Checks the engine's invariants (statistics equal a recount, blocks tile their
    /// segments) and that every segment has a live buffer of its size, for device and host
    /// memory. For tests and for debugging an application; it walks every block.
    ///
    /// # Errors
    ///
    /// A description of the first inconsistency found.
    pub fn check_consistency(&self) -> Result<(), String> {
        let state = self.shared.lock_flushed();
        check_tier(&state.engine, &state.segments)?;
        if let Some(host) = &state.host {
            check_tier(&host.engine, &host.segments).map_err(|e| format!("host memory: {e}"))?;
        }
        Ok(())
    }
}

/// Checks one engine's invariants and that every segment has a buffer of its size.
fn check_tier(engine: &Engine, segments: &DeviceSegments) -> Result<(), String> {
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
