//! The wgpu buffers behind the engine's segments.

use std::time::{Duration, Instant};

use crate::engine::{SegmentId, SegmentKind, SegmentSource, SourceError};
use crate::gpu::scope::{CaughtError, catch};

/// One wgpu buffer per live segment, indexed by segment id.
///
/// `create_segment` runs `create_buffer` under error scopes, so a device out-of-memory comes
/// back to the engine as an error (and on down its retry chain) instead of reaching the
/// uncaptured-error handler. `release_segment` destroys the buffer at once: the engine only
/// releases segments without live blocks, and wgpu keeps the memory alive until submitted work
/// that used it has finished.
pub(crate) struct SegmentBuffers {
    device: wgpu::Device,
    usage: wgpu::BufferUsages,
    label: String,
    buffers: Vec<Option<wgpu::Buffer>>,
    counters: SegmentCounters,
}

/// Segment buffers made and held, and the time wgpu and the driver took for them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SegmentCounters {
    /// Buffers created.
    pub created: u64,
    /// Buffers destroyed.
    pub destroyed: u64,
    /// Bytes of live buffers.
    pub live_bytes: u64,
    /// The peak of `live_bytes`.
    pub peak_bytes: u64,
    /// Time in `create_buffer` and `destroy`.
    pub driver_time: Duration,
}

impl SegmentBuffers {
    pub fn new(device: wgpu::Device, usage: wgpu::BufferUsages, label: String) -> Self {
        SegmentBuffers {
            device,
            usage,
            label,
            buffers: Vec::new(),
            counters: SegmentCounters::default(),
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

    /// Buffers made and held, and their cost.
    pub fn counters(&self) -> SegmentCounters {
        self.counters
    }
}

impl SegmentSource for SegmentBuffers {
    fn create_segment(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError> {
        let label = format!("{} segment {} ({})", self.label, id.0, kind.stat_name());
        let descriptor = wgpu::BufferDescriptor {
            label: Some(&label),
            size,
            usage: self.usage,
            mapped_at_creation: false,
        };
        let mut took = Duration::ZERO;
        let made = catch(&self.device, || {
            let start = Instant::now();
            let buffer = self.device.create_buffer(&descriptor);
            took = start.elapsed();
            buffer
        });
        self.counters.driver_time += took;
        let buffer = made.map_err(|error| match error {
            CaughtError::OutOfMemory(_) => SourceError::out_of_memory(error),
            _ => SourceError::other(error),
        })?;
        let slot = id.0 as usize;
        if self.buffers.len() <= slot {
            self.buffers.resize_with(slot + 1, || None);
        }
        self.buffers[slot] = Some(buffer);
        self.counters.created += 1;
        self.counters.live_bytes += size;
        self.counters.peak_bytes = self.counters.peak_bytes.max(self.counters.live_bytes);
        Ok(())
    }

    fn release_segment(&mut self, id: SegmentId, size: u64) {
        if let Some(buffer) = self.buffers[id.0 as usize].take() {
            let start = Instant::now();
            buffer.destroy();
            self.counters.driver_time += start.elapsed();
            self.counters.destroyed += 1;
            self.counters.live_bytes -= size;
        }
    }
}
