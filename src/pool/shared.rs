//! State shared by a pool and its blocks.

use std::sync::{Mutex, MutexGuard};

use super::device_segments::DeviceSegments;
use crate::engine::{BlockId, Engine};

/// Binding limits of the pool's usage, read from the device once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BindingLimits {
    /// Largest binding, in bytes.
    pub binding_limit: u64,
    /// `storage`, `uniform` or `buffer`.
    pub binding_kind: &'static str,
    /// Offset alignment of bindings.
    pub offset_alignment: u64,
}

pub(crate) struct PoolState {
    pub engine: Engine,
    pub segments: DeviceSegments,
}

/// Everything behind a [`Pool`](super::Pool) handle and its [`Block`](super::Block)s.
pub(crate) struct PoolShared {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: BindingLimits,
    pub state: Mutex<PoolState>,
}

impl PoolShared {
    /// Locks the state. A panic in another thread while it held the lock cannot leave the
    /// engine half-updated in a way later calls trip on (every engine call either completes
    /// or returns an error before changing anything), so a poisoned lock is recovered.
    pub fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Returns a block to the engine.
    pub fn free(&self, id: BlockId) {
        let mut state = self.lock();
        let PoolState { engine, segments } = &mut *state;
        // A block handle is freed exactly once, by its Drop, so the id is always live.
        let freed = engine.free(id, segments);
        debug_assert!(freed.is_ok(), "{freed:?}");
    }
}
