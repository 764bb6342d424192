//! Host-resident segments: where overflow and offloaded blocks live.

use super::segments::SegmentBuffers;
use crate::config::{Caching, Config, ExpandableSegments};
use crate::engine::{Engine, EngineError, EngineLimits};

/// Usages of host segments where the device has `MAPPABLE_PRIMARY_BUFFERS`: `MAP_READ`
/// without `MAP_WRITE` places the memory in host RAM (docs/DESIGN-NOTES.md, "Where a buffer
/// lands"), `STORAGE` lets kernels bind it, and the copy usages move blocks in and out by DMA.
pub const BINDABLE_HOST_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::MAP_READ
    .union(wgpu::BufferUsages::COPY_DST)
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::STORAGE);

/// Usages of host segments elsewhere: a mappable buffer may then only be a copy destination.
pub const STAGING_HOST_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

/// The host side of a pool: its own engine over host-resident segment buffers.
pub(crate) struct HostTier {
    pub engine: Engine,
    pub segments: SegmentBuffers,
    /// Whether kernels can bind host blocks and DMA can read them.
    pub bindable: bool,
}

impl HostTier {
    /// A host tier for a pool on `device` configured by `config`. It keeps the pool's
    /// placement policy; its cap is `limit` (residency's host limit), not the device cap.
    /// Fails only where the engine refuses the configuration. Without
    /// `MAPPABLE_PRIMARY_BUFFERS` every host block gets a buffer of its own, so that mapping
    /// one to read it never blocks GPU use of another.
    pub fn new(
        device: &wgpu::Device,
        config: &Config,
        label: &str,
        limit: Option<u64>,
    ) -> Result<HostTier, EngineError> {
        let bindable = device
            .features()
            .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
        let mut host_config = config.clone();
        host_config.memory_limit = limit;
        host_config.per_process_memory_fraction = None;
        host_config.garbage_collection_threshold = None;
        if !bindable {
            host_config.backend = Caching::Passthrough;
        }
        // A host pool never runs in pages mode.
        host_config.expandable_segments = Some(ExpandableSegments::False);
        let limits =
            EngineLimits::unlimited().with_max_segment_size(device.limits().max_buffer_size);
        let engine = Engine::new(host_config, limits)?;
        let usage = if bindable {
            BINDABLE_HOST_USAGE
        } else {
            STAGING_HOST_USAGE
        };
        let segments = SegmentBuffers::new(device.clone(), usage, format!("{label} host"));
        Ok(HostTier {
            engine,
            segments,
            bindable,
        })
    }
}
