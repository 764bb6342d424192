//! `check_consistency`: the engine's invariants plus the memory behind its segments.

use super::Pool;

impl Pool {
    /// Checks the engine's invariants (statistics equal a recount, blocks tile their
    /// segments) and the memory behind them, for device and host memory: every segment has
    /// a live buffer of its size; in pages mode, every range has its buffer and every live
    /// block lies on mapped pages. For tests and for debugging an application; it walks every
    /// block.
    ///
    /// # Errors
    ///
    /// A description of the first inconsistency found.
    pub fn check_consistency(&self) -> Result<(), String> {
        let state = self.shared.lock_flushed();
        state.memory.check(&state.engine)?;
        if let Some(host) = &state.host {
            host.check().map_err(|e| format!("host memory: {e}"))?;
        }
        Ok(())
    }
}
