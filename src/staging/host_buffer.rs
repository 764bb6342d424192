//! `HostBuffer`: one mappable wgpu buffer of a size class, counted in the statistics for as
//! long as it lives.

use std::sync::Arc;

use super::stats::{Counters, KindCounters};

/// The direction a staging buffer serves; it fixes the buffer's usages and so the memory it
/// lands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// `MAP_WRITE | COPY_SRC`. On discrete GPUs with a large BAR this is device memory the CPU
    /// writes through PCIe; never read it from the CPU.
    Upload,
    /// `MAP_READ | COPY_DST`: cached host memory the GPU writes by DMA.
    Download,
}

impl Kind {
    pub fn usage(self) -> wgpu::BufferUsages {
        match self {
            Kind::Upload => wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            Kind::Download => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Upload => "upload",
            Kind::Download => "download",
        }
    }

    pub fn counters(self, counters: &Counters) -> &KindCounters {
        match self {
            Kind::Upload => &counters.upload,
            Kind::Download => &counters.download,
        }
    }
}

/// A staging buffer. Its mapping state is an invariant of where it is:
/// - in the cache: an upload buffer is mapped for writing, a download buffer is unmapped;
///   neither is used by any GPU work still to run;
/// - held by a transfer, a user handle or an in-flight map operation: whatever that holder
///   says.
///
/// Dropping it destroys the wgpu buffer (wgpu defers the release until submitted work that
/// used it has finished) and counts it as destroyed.
pub(crate) struct HostBuffer {
    buffer: wgpu::Buffer,
    class: u64,
    kind: Kind,
    counters: Arc<Counters>,
}

impl HostBuffer {
    /// Wraps a freshly created buffer and counts it.
    pub fn new(buffer: wgpu::Buffer, class: u64, kind: Kind, counters: Arc<Counters>) -> Self {
        kind.counters(&counters).created(class);
        HostBuffer {
            buffer,
            class,
            kind,
            counters,
        }
    }

    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The buffer's size.
    pub fn class(&self) -> u64 {
        self.class
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        self.kind.counters(&self.counters).destroyed(self.class);
        self.buffer.destroy();
    }
}
