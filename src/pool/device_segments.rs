//! The wgpu buffers behind the engine's segments.

use crate::engine::{SegmentId, SegmentKind, SegmentSource, SourceError};
use crate::gpu::scope::{CaughtError, catch};
use crate::history::EventLog;

/// One wgpu buffer per live segment, indexed by segment id.
///
/// `create_segment` runs `create_buffer` under error scopes, so a device out-of-memory comes
/// back to the engine as an error (and on down its retry chain) instead of reaching the
/// uncaptured-error handler. `release_segment` destroys the buffer at once: the engine only
/// releases segments without live blocks, and wgpu keeps the memory alive until submitted work
/// that used it has finished.
pub(crate) struct DeviceSegments {
    device: wgpu::Device,
    usage: wgpu::BufferUsages,
    label: String,
    buffers: Vec<Option<wgpu::Buffer>>,
    /// The event log, while the pool records its history (`Pool::record_history`).
    pub history: Option<EventLog>,
}

impl DeviceSegments {
    pub fn new(device: wgpu::Device, usage: wgpu::BufferUsages, label: String) -> Self {
        DeviceSegments {
            device,
            usage,
            label,
            buffers: Vec::new(),
            history: None,
        }
    }

    /// The buffer of a live segment.
    pub fn buffer(&self, id: SegmentId) -> &wgpu::Buffer {
        self.buffers[id.0 as usize]
            .as_ref()
            .expect("the engine only hands out live segments")
    }

    /// How many segment buffers exist.
    pub fn live_buffers(&self) -> usize {
        self.buffers.iter().filter(|b| b.is_some()).count()
    }

    /// The usages every segment buffer has.
    pub fn usage(&self) -> wgpu::BufferUsages {
        self.usage
    }
}

impl SegmentSource for DeviceSegments {
    fn create_segment(
        &mut self,
        id: SegmentId,
        size: u64,
        pool: SegmentKind,
    ) -> Result<(), SourceError> {
        let label = format!("{} segment {} ({})", self.label, id.0, pool.stat_name());
        let descriptor = wgpu::BufferDescriptor {
            label: Some(&label),
            size,
            usage: self.usage,
            mapped_at_creation: false,
        };
        let buffer =
            catch(&self.device, || self.device.create_buffer(&descriptor)).map_err(|error| {
                match error {
                    CaughtError::OutOfMemory(_) => SourceError::out_of_memory(error),
                    _ => SourceError::other(error),
                }
            })?;
        let slot = id.0 as usize;
        if self.buffers.len() <= slot {
            self.buffers.resize_with(slot + 1, || None);
        }
        self.buffers[slot] = Some(buffer);
        if let Some(log) = &mut self.history {
            log.segment_created(id, size, 0, crate::history::now_us());
        }
        Ok(())
    }

    fn release_segment(&mut self, id: SegmentId, size: u64) {
        if let Some(log) = &mut self.history {
            log.segment_released(id, size, crate::history::now_us());
        }
        if let Some(buffer) = self.buffers[id.0 as usize].take() {
            buffer.destroy();
        }
    }
}
