//! Replaying a trace through a real pool on a GPU: device memory and driver time, beside the
//! engine's figures.

use std::time::Instant;

use serde::Serialize;

use super::error::Position;
use super::ops::{Trace, TraceOp};
use crate::config::Config;
use crate::engine::AllocError;
use crate::gpu::sparse::ChunkPolicy;
use crate::gpu::{DeviceMemoryInfo, GpuContext};
use crate::pool::{Block, MemoryMode, Pool, PoolError, PoolOptions};

/// Settings of [`replay_on_gpu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GpuReplayOptions {
    /// Every size is divided by this (rounded up; at least 1 B), so that a trace recorded on
    /// a large GPU fits a small device (lavapipe has 2 GiB of sparse address space).
    pub scale: u64,
    /// Device memory for `per_process_memory_fraction`; `None` reads it from the adapter.
    pub device_memory: Option<u64>,
    /// How a page-mapped pool sizes its device memory chunks.
    pub chunk_policy: ChunkPolicy,
}

impl Default for GpuReplayOptions {
    fn default() -> Self {
        GpuReplayOptions {
            scale: 1,
            device_memory: None,
            chunk_policy: ChunkPolicy::default(),
        }
    }
}

impl GpuReplayOptions {
    /// Divides every size by `scale` (at least 1).
    pub fn with_scale(mut self, scale: u64) -> Self {
        self.scale = scale.max(1);
        self
    }

    /// Sets the device memory size for `per_process_memory_fraction`.
    pub fn with_device_memory(mut self, bytes: Option<u64>) -> Self {
        self.device_memory = bytes;
        self
    }

    /// Sets the chunk policy of a page-mapped pool.
    pub fn with_chunk_policy(mut self, policy: ChunkPolicy) -> Self {
        self.chunk_policy = policy;
        self
    }
}

/// What a replay on a GPU measured. Serialized as `wgpool replay --gpu --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct GpuReplayReport {
    /// The adapter the pool ran on.
    pub adapter: String,
    /// The configuration, in `WGPOOL_CONF` syntax (empty for the defaults).
    pub conf: String,
    /// `pages` or `segments`: how the pool held memory.
    pub mode: MemoryMode,
    /// Why the pool ran in that mode.
    pub mode_reason: String,
    /// The divisor applied to every size.
    pub scale: u64,
    /// Operations replayed.
    pub ops: u64,
    /// Peak of the summed (scaled) requested sizes of live allocations.
    pub peak_live_bytes: u64,
    /// The engine's peak of reserved bytes (in pages mode: pages mapped plus pages held).
    pub peak_reserved_bytes: u64,
    /// `peak_reserved_bytes / peak_live_bytes`.
    pub ratio: f64,
    /// Peak of allocated (rounded) bytes.
    pub peak_allocated_bytes: u64,
    /// The peak of device memory the pool held, as the memory layer counts it: segment
    /// buffers, or `VkDeviceMemory` chunks behind the pages.
    pub device_memory_peak_bytes: u64,
    /// `device_memory_peak_bytes / peak_reserved_bytes`.
    pub device_over_reserved: f64,
    /// With `VK_EXT_memory_budget`: the peak over the replay of the heap's usage less its
    /// usage before the pool existed. It counts every allocation on the heap (wgpu's own
    /// included), so it checks `device_memory_peak_bytes` from outside; `null` without the
    /// extension.
    pub heap_usage_peak_bytes: Option<u64>,
    /// Time in the driver getting and giving back device memory: `create_buffer` and
    /// `destroy` for segments; memory allocation and freeing, binds, and creating and
    /// releasing ranges and their wrappers for pages.
    pub driver_time_s: f64,
    /// Of `driver_time_s`: getting and giving back memory (`create_buffer` and `destroy`, or
    /// `vkAllocateMemory` and `vkFreeMemory`).
    pub allocation_time_s: f64,
    /// Of `driver_time_s`: `vkQueueBindSparse` calls (and their fence waits where binds are
    /// not ordered on the GPU).
    pub bind_time_s: f64,
    /// CPU waits for the GPU before pages were unmapped, and for pending binds before chunks
    /// were freed or ranges released (not driver time).
    pub unmap_wait_s: f64,
    /// Device memory allocations (segment buffers, or chunks).
    pub device_allocations: u64,
    /// Device memory given back (segment buffers destroyed, or chunks freed).
    pub device_frees: u64,
    /// `vkQueueBindSparse` calls (0 for segments).
    pub bind_calls: u64,
    /// Of `driver_time_s`: creating and releasing ranges and their wrappers (0 for
    /// segments).
    pub range_time_s: f64,
    /// Extra wgpu wrappers made over ranges (0 for segments).
    pub wrappers_created: u64,
    /// Segments (or ranges) created and released, as the engine counts them.
    pub segments_created: u64,
    /// See `segments_created`.
    pub segments_released: u64,
    /// Allocations that needed the release-everything retry.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Wall time of the whole replay, pool creation included.
    pub wall_time_s: f64,
}

/// Why [`replay_on_gpu`] stopped. Each variant keeps the pool's own error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuReplayError {
    /// The pool could not be created: the configuration cannot be applied to this device
    /// (say `expandable_segments:True` on a device that cannot map pages), or setting up
    /// its memory failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// An allocation of the trace failed with an error other than out-of-memory (which is
    /// counted, not an error): a request above the largest block the pool serves
    /// ([`AllocError::TooLarge`], which names the size and the device's limit), or a
    /// failure of the device.
    #[error("{position}: {source}")]
    Alloc {
        /// The operation of the trace that failed.
        position: Position,
        /// The pool's error.
        #[source]
        source: Box<AllocError>,
    },
}

/// Replays `trace` under `config` through a [`Pool`] on `gpu`'s device: every allocation
/// is a real block, every free drops it. The pool is page-mapped where the device and the
/// configuration allow it (see [`Pool::memory_mode`]).
///
/// Streams are not told apart (the pool serves one stream). An allocation the pool refuses
/// with out-of-memory is counted in `num_ooms`, and its later free skipped, as in
/// [`replay`](super::replay).
///
/// # Errors
///
/// [`GpuReplayError::Pool`] when the pool could not be created (for example
/// `expandable_segments:True` on a device that cannot map pages), and
/// [`GpuReplayError::Alloc`] when an allocation failed with an error other than
/// out-of-memory (a request above [`Pool::max_block_size`]).
pub fn replay_on_gpu(
    trace: &Trace,
    config: &Config,
    gpu: &GpuContext,
    options: &GpuReplayOptions,
) -> Result<GpuReplayReport, GpuReplayError> {
    let start = Instant::now();
    let heap_before = heap_usage(gpu);
    let device_memory = options
        .device_memory
        .or_else(|| gpu.memory_info().and_then(|info| info.device_local_bytes()));
    let mut pool_options = PoolOptions::default()
        .with_label("replay")
        .with_chunk_policy(options.chunk_policy);
    if let Some(bytes) = device_memory {
        pool_options = pool_options.with_device_memory(bytes);
    }
    let pool = Pool::with_options(gpu.device(), gpu.queue(), config.clone(), pool_options)?;
    let scale = options.scale.max(1);
    let mut slots: Vec<Option<(Block, u64)>> = (0..trace.slots).map(|_| None).collect();
    let (mut live, mut peak_live) = (0u64, 0u64);
    let mut heap_peak = heap_before.map(|_| 0u64);
    let mut device_bytes = 0u64;
    let alloc = |size: u64, op: usize| -> Result<Option<Block>, GpuReplayError> {
        match pool.alloc(size.div_ceil(scale).max(1)) {
            Ok(block) => Ok(Some(block)),
            Err(AllocError::OutOfMemory(_)) => Ok(None),
            Err(source) => Err(GpuReplayError::Alloc {
                position: trace.position(op),
                source: Box::new(source),
            }),
        }
    };
    for (i, op) in trace.ops.iter().enumerate() {
        match *op {
            TraceOp::Alloc { slot, size, .. } if size > 0 => {
                let block = alloc(size, i)?;
                if let Some(block) = block {
                    let scaled = size.div_ceil(scale);
                    live += scaled;
                    peak_live = peak_live.max(live);
                    slots[slot as usize] = Some((block, scaled));
                }
            }
            TraceOp::Alloc { .. } => {}
            TraceOp::Free { slot } => {
                if let Some((block, scaled)) = slots[slot as usize].take() {
                    live -= scaled;
                    drop(block);
                }
            }
            TraceOp::Refused { size, .. } => {
                drop(alloc(size, i)?);
            }
        }
        // Read the heap only when the pool's device memory changed: the query is a driver
        // call.
        if let (Some(before), Some(peak)) = (heap_before, heap_peak.as_mut()) {
            let now = pool.device_memory_usage().device_bytes;
            if now != device_bytes {
                device_bytes = now;
                if let Some(usage) = heap_usage(gpu) {
                    *peak = (*peak).max(usage.saturating_sub(before));
                }
            }
        }
    }
    drop(slots);
    let stats = pool.memory_stats();
    let usage = pool.device_memory_usage();
    let peak_reserved = stats.reserved_bytes.all.peak;
    let ratio = |x: u64, of: u64| if of == 0 { 0.0 } else { x as f64 / of as f64 };
    let report = GpuReplayReport {
        adapter: gpu.info().name.clone(),
        conf: config.to_conf_string(),
        mode: pool.memory_mode(),
        mode_reason: pool.memory_mode_reason(),
        scale,
        ops: trace.ops.len() as u64,
        peak_live_bytes: peak_live,
        peak_reserved_bytes: peak_reserved,
        ratio: ratio(peak_reserved, peak_live),
        peak_allocated_bytes: stats.allocated_bytes.all.peak,
        device_memory_peak_bytes: usage.device_bytes_peak,
        device_over_reserved: ratio(usage.device_bytes_peak, peak_reserved),
        heap_usage_peak_bytes: heap_peak,
        driver_time_s: usage.driver_time.as_secs_f64(),
        allocation_time_s: usage.allocation_time.as_secs_f64(),
        bind_time_s: usage.bind_time.as_secs_f64(),
        unmap_wait_s: usage.unmap_wait_time.as_secs_f64(),
        device_allocations: usage.allocations,
        device_frees: usage.frees,
        bind_calls: usage.bind_calls,
        range_time_s: usage.range_time.as_secs_f64(),
        wrappers_created: usage.wrappers_created,
        segments_created: stats.num_device_alloc,
        segments_released: stats.num_device_free,
        num_alloc_retries: stats.num_alloc_retries,
        num_ooms: stats.num_ooms,
        wall_time_s: start.elapsed().as_secs_f64(),
    };
    drop(pool);
    Ok(report)
}

/// Usage of the device-local heaps, where the driver reports it.
fn heap_usage(gpu: &GpuContext) -> Option<u64> {
    let info: DeviceMemoryInfo = gpu.memory_info()?;
    if !info.budget_supported {
        return None;
    }
    info.heaps
        .iter()
        .filter(|h| h.device_local)
        .map(|h| h.usage)
        .sum()
}
