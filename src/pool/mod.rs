//! The wgpu pool: real device buffers behind the placement engine.
//!
//! A [`Pool`] owns segment buffers of one usage set and hands out [`Block`]s: RAII handles to
//! 512 B-aligned ranges of those buffers that return to the pool on drop.
//!
//! ```no_run
//! use wgpool::config::Config;
//! use wgpool::gpu::{GpuContext, HeadlessOptions};
//! use wgpool::pool::Pool;
//!
//! let gpu = GpuContext::headless(&HeadlessOptions::default())?;
//! let pool = Pool::from_context(&gpu, Config::from_env()?)?;
//! let block = pool.alloc(1 << 20)?;
//! pool.write(&block, &vec![7u8; 1 << 20])?;
//! assert_eq!(pool.read(&block)?[..4], [7, 7, 7, 7]);
//! drop(block); // back in the pool's cache
//! pool.empty_cache(); // and the segment buffer destroyed
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Ordering: reuse after free
//!
//! wgpu has one queue per device, and work on it runs in submission order. A block dropped
//! while submitted work still reads or writes it may be handed out again at once; anything
//! done with the new block reaches the GPU in a later submission, which runs after the old
//! work. So device-side reuse needs no waiting. Memory the CPU touches is different: mapping
//! (as in [`Pool::read`]) waits for the GPU work that used it.
//!
//! # Out of memory
//!
//! Segment creation runs under wgpu error scopes. A device out-of-memory goes down the
//! engine's retry chain (release cached blocks, retry) and ends, if nothing helps, as
//! [`AllocError::OutOfMemory`] with the engine's diagnostic; the pool stays usable.

mod block;
mod device_memory;
mod device_segments;
mod error;
mod host_tier;
mod movement;
mod residency;
mod reuse_cache;
mod shared;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub use block::Block;
pub use error::{BindingError, MoveError, PoolError};
pub use host_tier::{BINDABLE_HOST_USAGE, STAGING_HOST_USAGE};
pub use residency::Residency;

use crate::config::{Config, Overflow};
use crate::engine::{AllocError, Engine, EngineLimits, MemoryStats, SegmentSnapshot};
use crate::gpu::GpuContext;
use crate::gpu::transfer::{TransferError, map_read_into, read_region, write_region};
use block::BlockParts;
use device_segments::DeviceSegments;
use reuse_cache::ReuseCache;
use shared::{BindingLimits, PoolShared, PoolState};

/// The default usages of pool segments.
pub const DEFAULT_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// Settings of a pool beyond `WGPOOL_CONF`.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Usages of every segment buffer. A pool serves one usage set; make one pool per set
    /// (storage, uniform, vertex, index, indirect). Each pool keeps its own cap.
    pub usage: wgpu::BufferUsages,
    /// Label prefix of the segment buffers.
    pub label: String,
    /// Device memory in bytes for `per_process_memory_fraction`. `None` reads it from the
    /// device (Vulkan memory heaps); set it where the backend cannot report it.
    pub device_memory: Option<u64>,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            usage: DEFAULT_USAGE,
            label: "wgpool".to_string(),
            device_memory: None,
        }
    }
}

/// A caching pool of device memory. Cheap to clone: clones share the same pool.
/// `Pool` is `Send + Sync`; allocation and free from many threads are serialized by one lock
/// (the reuse cache in front of it takes none).
///
/// Blocks may outlive every `Pool` handle: the memory stays valid until the last block is
/// dropped, and then every segment buffer is destroyed.
pub struct Pool {
    shared: Arc<PoolShared>,
}

impl Clone for Pool {
    fn clone(&self) -> Pool {
        self.shared.handles.fetch_add(1, Ordering::AcqRel);
        Pool {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last handle: nobody can reuse parked blocks any more, and they would keep
            // the pool alive, so they go back to the engine.
            drop(self.shared.lock_flushed());
        }
    }
}

impl Pool {
    /// A pool of [`DEFAULT_USAGE`] segments on `device`.
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        config: Config,
    ) -> Result<Pool, PoolError> {
        Pool::with_options(device, queue, config, PoolOptions::default())
    }

    /// A pool on a [`GpuContext`], with the device memory size read from its adapter.
    pub fn from_context(gpu: &GpuContext, config: Config) -> Result<Pool, PoolError> {
        let device_memory = gpu.memory_info().and_then(|info| info.device_local_bytes());
        let options = PoolOptions {
            device_memory,
            ..PoolOptions::default()
        };
        Pool::with_options(gpu.device(), gpu.queue(), config, options)
    }

    /// A pool with explicit [`PoolOptions`].
    pub fn with_options(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        config: Config,
        options: PoolOptions,
    ) -> Result<Pool, PoolError> {
        let usage = options.usage;
        if usage.is_empty() {
            return Err(PoolError::Usage {
                usage,
                reason: "no usage given",
            });
        }
        if usage.intersects(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE) {
            return Err(PoolError::Usage {
                usage,
                reason: "mappable host memory belongs to the staging pool, not a device pool",
            });
        }
        let limits = device.limits();
        let binding = binding_limits(usage, &limits);
        if binding.offset_alignment > crate::engine::rounding::MIN_BLOCK_SIZE {
            return Err(PoolError::Alignment {
                alignment: binding.offset_alignment,
            });
        }
        let device_memory = options
            .device_memory
            .or_else(|| device_memory::device_local_bytes(device));
        let engine_limits = EngineLimits {
            device_memory,
            max_segment_size: limits.max_buffer_size,
        };
        let reuse = ReuseCache::new(config.max_split_size.unwrap_or(u64::MAX));
        let engine = Engine::new(config, engine_limits).map_err(PoolError::Config)?;
        let segments = DeviceSegments::new(device.clone(), usage, options.label.clone());
        Ok(Pool {
            shared: Arc::new(PoolShared {
                device: device.clone(),
                queue: queue.clone(),
                limits: binding,
                state: Mutex::new(PoolState {
                    engine,
                    segments,
                    host: None,
                }),
                reuse,
                handles: AtomicUsize::new(1),
                host_bindable: device
                    .features()
                    .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS),
                label: options.label,
            }),
        })
    }

    /// A block of at least `size` bytes.
    ///
    /// Fails with [`AllocError::ZeroSize`] for 0, [`AllocError::TooLarge`] above the device's
    /// `max_buffer_size`, and [`AllocError::OutOfMemory`] when neither the cache, nor a new
    /// segment, nor releasing the whole cache and retrying helps.
    ///
    /// A block dropped just before is handed straight back to the next request of exactly
    /// its size (see the reuse cache); every other request is placed by the policy with all
    /// free memory visible to it.
    #[inline]
    pub fn alloc(&self, size: u64) -> Result<Block, AllocError> {
        if let Some((shared, parts)) = self.shared.reuse.take(size) {
            return Ok(Block::new(shared, parts));
        }
        self.alloc_through_engine(size)
    }

    fn alloc_through_engine(&self, size: u64) -> Result<Block, AllocError> {
        let mut state = self.shared.lock_flushed();
        let PoolState {
            engine, segments, ..
        } = &mut *state;
        let (allocation, residency) = match engine.allocate(size, 0, segments) {
            Ok(allocation) => (allocation, Residency::Device),
            Err(AllocError::OutOfMemory(oom)) if engine.config().overflow == Overflow::Host => (
                self.overflow_to_host(&mut state, size, oom)?,
                Residency::Host,
            ),
            Err(error) => return Err(error),
        };
        let buffer = match residency {
            Residency::Device => state.segments.buffer(allocation.segment),
            Residency::Host => state
                .host
                .as_ref()
                .expect("overflow made the host tier")
                .segments
                .buffer(allocation.segment),
        }
        .clone();
        drop(state);
        Ok(Block::new(
            self.shared.clone(),
            Box::new(BlockParts::new(allocation, buffer, residency)),
        ))
    }

    /// Serves a request the device could not from host memory (`overflow:host`). If host
    /// memory fails too, the device's out-of-memory error comes back, saying how much went to
    /// host memory.
    fn overflow_to_host(
        &self,
        state: &mut PoolState,
        size: u64,
        mut oom: crate::engine::OutOfMemory,
    ) -> Result<crate::engine::Allocation, AllocError> {
        let host = match self.shared.host_tier(state) {
            Ok(host) => host,
            Err(error) => {
                oom.cause = crate::engine::OomCause::Device(format!(
                    "{}; host overflow unavailable: {error}",
                    oom.cause
                ));
                return Err(AllocError::OutOfMemory(oom));
            }
        };
        match host.engine.allocate(size, 0, &mut host.segments) {
            Ok(allocation) => Ok(allocation),
            Err(AllocError::OutOfMemory(host_oom)) => {
                oom.host_overflow = Some(host.engine.memory_stats().allocated_bytes.all.current);
                oom.cause = crate::engine::OomCause::Device(format!(
                    "host memory refused the overflow too: {}",
                    host_oom.cause
                ));
                Err(AllocError::OutOfMemory(oom))
            }
            Err(error) => Err(error),
        }
    }

    /// Statistics of host-resident memory (overflow and offloaded blocks), kept apart from the
    /// device statistics of [`memory_stats`](Pool::memory_stats). `None` until the pool first
    /// uses host memory.
    pub fn host_memory_stats(&self) -> Option<MemoryStats> {
        self.shared
            .lock_flushed()
            .host
            .as_ref()
            .map(|host| host.engine.memory_stats())
    }

    /// A copy of the statistics, with PyTorch's keys and meanings.
    pub fn memory_stats(&self) -> MemoryStats {
        self.shared.lock_flushed().engine.memory_stats()
    }

    /// Sets every peak statistic to its current value.
    pub fn reset_peak_stats(&self) {
        self.shared.lock_flushed().engine.reset_peak_stats();
    }

    /// Zeroes the accumulated totals and counters (PyTorch's
    /// `reset_accumulated_memory_stats`).
    pub fn reset_accumulated_stats(&self) {
        self.shared.lock_flushed().engine.reset_accumulated_stats();
    }

    /// The statistics as a text table.
    ///
    /// With host memory in use, a second table follows for the host-resident blocks.
    pub fn memory_summary(&self) -> String {
        let state = self.shared.lock_flushed();
        let mut out = state.engine.memory_summary();
        if let Some(host) = &state.host {
            out.push_str("host-resident memory (overflow and offloaded blocks):\n");
            out.push_str(&host.engine.memory_summary());
        }
        out
    }

    /// The segments and their blocks.
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        self.shared.lock_flushed().engine.snapshot()
    }

    /// Destroys every cached segment buffer that holds no live block; `reserved_bytes` drops
    /// by their total size.
    pub fn empty_cache(&self) {
        let mut state = self.shared.lock_flushed();
        let PoolState {
            engine,
            segments,
            host,
        } = &mut *state;
        engine.empty_cache(segments);
        if let Some(host) = host {
            host.engine.empty_cache(&mut host.segments);
        }
    }

    /// Checks the engine's invariants (statistics equal a recount, blocks tile their
    /// segments) and that every segment has a live buffer of its size. For tests and for
    /// debugging an application; it walks every block.
    pub fn check_consistency(&self) -> Result<(), String> {
        let state = self.shared.lock_flushed();
        check_tier(&state.engine, &state.segments)?;
        if let Some(host) = &state.host {
            check_tier(&host.engine, &host.segments).map_err(|e| format!("host memory: {e}"))?;
        }
        Ok(())
    }

    /// The cap on reserved bytes, if any.
    pub fn memory_cap(&self) -> Option<u64> {
        self.shared.lock().engine.memory_cap()
    }
    /// The configuration the pool runs.
    pub fn config(&self) -> Config {
        self.shared.lock().engine.config().clone()
    }

    /// The usages of the pool's segment buffers.
    pub fn usage(&self) -> wgpu::BufferUsages {
        self.shared.lock().segments.usage()
    }

    /// The device.
    pub fn device(&self) -> &wgpu::Device {
        &self.shared.device
    }

    /// The queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.shared.queue
    }

    /// Copies `data` into the start of `block`, in queue order: work submitted after this
    /// call sees the data. `data` may be shorter than the block; it may not be longer.
    pub fn write(&self, block: &Block, data: &[u8]) -> Result<(), TransferError> {
        if data.len() as u64 > block.size() {
            return Err(TransferError::BeyondBlock {
                len: data.len() as u64,
                size: block.size(),
            });
        }
        let whole = data.len() / 4 * 4;
        let (head, tail) = data.split_at(whole);
        let device = &self.shared.device;
        write_region(
            device,
            &self.shared.queue,
            block.buffer(),
            block.offset(),
            head,
        )?;
        if !tail.is_empty() {
            // The block's capacity is a multiple of 512 B, so the padded word is its own.
            let mut word = [0u8; 4];
            word[..tail.len()].copy_from_slice(tail);
            write_region(
                device,
                &self.shared.queue,
                block.buffer(),
                block.offset() + whole as u64,
                &word,
            )?;
        }
        Ok(())
    }

    /// The block's `size()` bytes, after all work submitted so far. Blocks until the data
    /// is on the host.
    pub fn read(&self, block: &Block) -> Result<Vec<u8>, TransferError> {
        if !block
            .buffer()
            .usage()
            .contains(wgpu::BufferUsages::COPY_SRC)
        {
            // A host block without MAPPABLE_PRIMARY_BUFFERS: its buffer is its own, mappable.
            let mut data = Vec::with_capacity(block.bound_size() as usize);
            let range = block.offset()..block.offset() + block.bound_size();
            map_read_into(&self.shared.device, block.buffer(), range, &mut data)?;
            data.truncate(block.size() as usize);
            return Ok(data);
        }
        let mut data = read_region(
            &self.shared.device,
            &self.shared.queue,
            block.buffer(),
            block.offset(),
            block.bound_size(),
        )?;
        data.truncate(block.size() as usize);
        Ok(data)
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stats = self.memory_stats();
        f.debug_struct("Pool")
            .field("allocated_bytes", &stats.allocated_bytes.all.current)
            .field("reserved_bytes", &stats.reserved_bytes.all.current)
            .finish()
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

/// The binding limit and offset alignment of a usage set: the strictest among the binding
/// kinds it contains.
fn binding_limits(usage: wgpu::BufferUsages, limits: &wgpu::Limits) -> BindingLimits {
    let mut out = BindingLimits {
        binding_limit: limits.max_buffer_size,
        binding_kind: "buffer",
        offset_alignment: 4,
    };
    if usage.contains(wgpu::BufferUsages::UNIFORM) {
        out = BindingLimits {
            binding_limit: limits.max_uniform_buffer_binding_size,
            binding_kind: "uniform",
            offset_alignment: limits.min_uniform_buffer_offset_alignment as u64,
        };
    }
    if usage.contains(wgpu::BufferUsages::STORAGE) {
        let storage = limits.max_storage_buffer_binding_size;
        if storage < out.binding_limit {
            out.binding_limit = storage;
            out.binding_kind = "storage";
        }
        out.offset_alignment = out
            .offset_alignment
            .max(limits.min_storage_buffer_offset_alignment as u64);
    }
    out
}
