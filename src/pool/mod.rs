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
//! [`AllocError::OutOfMemory`](crate::engine::AllocError::OutOfMemory) with the engine's diagnostic; the pool stays usable.

mod alloc;
mod bind_group;
mod binding;
mod block;
mod block_ref;
mod check;
mod consistency_error;
mod error;
mod history;
mod movement;
mod options;
mod owner_bias;
mod pool_shared;
mod read_write;
mod record_shelf;
mod recordings;
// Audited: banked pool references, turned back into `Arc`s; each unsafe block states its rule.
mod reference_bank;
mod residence;
mod residency;
mod residency_api;
mod residency_options;
mod residents;
mod reuse_cache;
mod state_lock;
mod stats;
mod submission;
mod submissions;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

pub use crate::engine::MemoryMode;
pub use crate::memory::DeviceMemoryUsage;
pub use crate::memory::{BINDABLE_HOST_USAGE, STAGING_HOST_USAGE};
pub use bind_group::PoolBindGroup;
pub use binding::{BindingAccess, BlockBindings};
pub use block::Block;
pub use block_ref::BlockRef;
pub use consistency_error::ConsistencyError;
pub use error::{BindingError, MoveError, PoolError, ReadWriteError, ResidencyError};
pub use options::{DEFAULT_USAGE, FreeTiming, HeldLimitAction, PoolOptions};
pub use owner_bias::{owner_bias_prepared, prepare_owner_bias};
pub use residency::Residency;
pub use residency_api::ResidencyStats;
pub use residency_options::ResidencyOptions;
pub use submissions::{Recording, held_blocks_on, mark_submitted};

use crate::config::{Config, Overflow};
use crate::engine::{Engine, EngineLimits};
use crate::gpu::GpuContext;
use crate::memory::{Backing, PlanError, WorkClock};
use options::default_held_limit;
use owner_bias::OwnerBias;
use pool_shared::{BindingLimits, PoolShared, PoolState};
use reuse_cache::ReuseCache;
use state_lock::StateLock;
use submissions::DeviceSubmissions;

/// A caching pool of device memory. Cheap to clone: clones share the same pool.
/// `Pool` is `Send + Sync`; allocation and free from many threads are serialized by one lock
/// (the reuse cache in front of it takes none).
///
/// Blocks may outlive every `Pool` handle: the memory stays valid until the last block is
/// dropped, and then every segment buffer is destroyed.
pub struct Pool {
    shared: Arc<PoolShared>,
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Pool>();
};

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
            let mut state = self.shared.lock_flushed();
            // Nothing allocates any more: the banked references go back (this handle's own
            // reference outlives the call), and nothing banks after this (`handles` is 0).
            state.references.release(&self.shared);
            if self.shared.log_leaks {
                if let Some(report) = stats::leak_report(&state) {
                    log::warn!("{}: {report}", self.shared.label);
                }
            }
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
        Pool::from_context_with(gpu, config, PoolOptions::default())
    }

    /// A pool on a [`GpuContext`] with explicit [`PoolOptions`]: the device memory size, and
    /// for residency the `VK_EXT_memory_budget` budget, are read from its adapter where the
    /// options do not give them.
    pub fn from_context_with(
        gpu: &GpuContext,
        config: Config,
        mut options: PoolOptions,
    ) -> Result<Pool, PoolError> {
        let info = gpu.memory_info();
        if options.device_memory.is_none() {
            options.device_memory = info.as_ref().and_then(|info| info.device_local_bytes());
        }
        options.memory_budget = info.as_ref().and_then(|info| info.device_local_budget());
        if options.error_log.is_none() {
            options.error_log = Some(gpu.errors().clone());
        }
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
        let host_bindable = device
            .features()
            .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
        if config.overflow == Overflow::Host && !host_bindable {
            return Err(PoolError::HostOverflowUnsupported);
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
            .or_else(|| crate::memory::device_local_bytes(device));
        // The memory mode is decided once; the engine and the backing both follow the plan.
        let plan = crate::memory::plan(&config, device).map_err(|error| match error {
            PlanError::NoPageMapping(reason) => PoolError::PageMappingUnavailable { reason },
            PlanError::Engine(error) => PoolError::Config(error),
        })?;
        let reuses_blocks = config.reuses_blocks(plan.mode == MemoryMode::Pages);
        let engine_limits = EngineLimits::unlimited()
            .with_device_memory(device_memory)
            .with_max_segment_size(limits.max_buffer_size)
            .with_page_mapping(plan.page_mapping);
        let bias = Arc::new(OwnerBias::new(options.owner_bias));
        let reuse = ReuseCache::new(config.max_split_size.unwrap_or(u64::MAX), bias.clone());
        let pytorch_placement = config.policy == crate::config::Policy::Pytorch;
        let mut engine =
            Engine::with_mode(config, engine_limits, plan.mode).map_err(PoolError::Config)?;
        let mut memory = crate::memory::for_plan(
            &plan,
            device,
            queue,
            usage,
            &options.label,
            options.chunk_policy,
        );
        debug_assert_eq!(engine.memory_mode(), memory.mode(), "one plan, one mode");
        if pytorch_placement {
            // Equal free blocks are reused in the order of their CUDA addresses, as in
            // PyTorch and in `wgpool replay`.
            memory.use_cuda_addresses();
        }
        let mode_reason = plan.reason;
        let residents = match &options.residency {
            Some(residency) => Some(residents_for(
                residency,
                &options,
                &memory,
                &mut engine,
                device_memory,
                host_bindable,
            )?),
            None => None,
        };
        memory.set_limit(engine.memory_cap());
        let submissions = DeviceSubmissions::for_device(device);
        memory.set_work_clock(WorkClock::new(
            submissions.points.clone(),
            options.free_timing == FreeTiming::AfterSubmit,
        ));
        let held_limit = match options.held_limit_action {
            HeldLimitAction::Off => None,
            HeldLimitAction::Warn | HeldLimitAction::Error => Some(
                options
                    .held_limit
                    .unwrap_or_else(|| default_held_limit(engine.memory_cap(), device_memory)),
            ),
        };
        let memory_changes = memory.changes.clone();
        let pool = Pool {
            shared: Arc::new(PoolShared {
                device: device.clone(),
                queue: queue.clone(),
                limits: binding,
                state: StateLock::new(
                    bias,
                    PoolState {
                        engine,
                        memory,
                        mode_reason,
                        host: None,
                        held: Vec::new(),
                        held_bytes: 0,
                        held_warned: false,
                        host_overflows: 0,
                        labels: Default::default(),
                        residents,
                        shelf: Default::default(),
                        references: Default::default(),
                    },
                ),
                reuse,
                handles: AtomicUsize::new(1),
                host_bindable,
                label: options.label,
                usage,
                free_timing: options.free_timing,
                device_memory,
                memory_changes: memory_changes.clone(),
                submissions,
                held_limit,
                held_limit_action: options.held_limit_action,
                over_held_limit: AtomicBool::new(false),
                held_blocks: AtomicUsize::new(0),
                referenced_bytes: AtomicU64::new(0),
                recording: AtomicBool::new(false),
                reuse_off: !reuses_blocks,
                log_leaks: options.log_leaks,
                use_clock: Default::default(),
                error_log: options.error_log,
            }),
        };
        pool.shared.submissions.register(&pool.shared);
        Ok(pool)
    }

    /// The configuration the pool runs.
    pub fn config(&self) -> Config {
        self.shared.lock().engine.config().clone()
    }

    /// The usages of the pool's segment buffers (or ranges).
    pub fn usage(&self) -> wgpu::BufferUsages {
        self.shared.usage
    }

    /// How the pool holds device memory: [`MemoryMode::Pages`] where the device can map
    /// pages (Vulkan sparse binding, from [`sparse::request_device`]) and
    /// `expandable_segments` allows it, else [`MemoryMode::Segments`].
    ///
    /// [`sparse::request_device`]: crate::gpu::sparse::request_device
    pub fn memory_mode(&self) -> MemoryMode {
        self.shared.lock().memory.mode()
    }

    /// Why the pool runs in its [`memory_mode`](Pool::memory_mode): the page size and bind
    /// queue for pages, or what kept it from mapping pages.
    pub fn memory_mode_reason(&self) -> String {
        self.shared.lock().mode_reason.clone()
    }

    /// Whether the pool's owner bias still holds (see
    /// [`PoolOptions::with_owner_bias`](options::PoolOptions::with_owner_bias)): its first
    /// thread (or, before any use, whichever thread comes first) takes the pool's locks
    /// without locked instructions. `false` once another thread has used the pool, where
    /// the bias was not asked for, or where the system cannot revoke one. Asking takes no
    /// lock and changes nothing.
    pub fn owner_bias_holds(&self) -> bool {
        self.shared.state.bias().is_held()
    }

    /// The largest block the pool serves; [`alloc`](Pool::alloc) refuses a larger request
    /// with [`AllocError::TooLarge`](crate::engine::AllocError::TooLarge), whose `max` is
    /// this value.
    ///
    /// - Segments mode: the device's `max_buffer_size`, rounded down to 512 B (a block never
    ///   spans two segment buffers).
    /// - Pages mode: the largest address range the device can reserve, its largest buffer
    ///   within its sparse address space rounded down to the page (lavapipe: 2 GiB - 4 KiB;
    ///   an H100: wgpu's `max_buffer_size`, 4 GiB - 2 MiB), then to 512 B. A block larger than
    ///   the usual range ([`PagedMemory::range_size`]) gets a range of its own size, which
    ///   needs that much free address space on the device: where other pools hold it, the
    ///   request is an out-of-memory error that names the address space.
    ///
    /// [`PagedMemory::range_size`]: crate::gpu::sparse::PagedMemory::range_size
    pub fn max_block_size(&self) -> u64 {
        self.shared.lock().engine.max_block_size()
    }

    /// Device memory the pool holds, as the memory layer counts it (segment buffers, or
    /// page chunks), its peak, and the time spent in the driver getting and giving it back.
    pub fn device_memory_usage(&self) -> DeviceMemoryUsage {
        self.shared.lock().memory.usage_report()
    }

    /// Submits the binds queued on the pool's device now (pages mode, `page_bind_batch`)
    /// rather than at the next wgpu submission, counted as the pool's bind call; for
    /// measurements that end with every block bound.
    pub(crate) fn submit_queued_binds(&self) -> Result<(), crate::engine::SourceError> {
        self.shared.lock().memory.submit_queued_binds()
    }

    /// Blocks until every bind submitted on the pool's device has been applied on the GPU
    /// (pages mode; at once in segments mode); for measurements of when mapped memory is
    /// usable.
    pub(crate) fn wait_for_binds(&self) -> Result<(), crate::engine::SourceError> {
        self.shared.lock().memory.wait_for_binds()
    }

    /// A counter that grows whenever the pool got or gave back device memory;
    /// read without the pool's lock, for watchers that query the device only then.
    pub(crate) fn device_memory_changes(&self) -> u64 {
        self.shared
            .memory_changes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How the pool maps pages (page size, largest range, usual range), or `None` with fixed
    /// segments: the device facts its engine places blocks with.
    pub fn page_mapping(&self) -> Option<crate::engine::PageMapping> {
        use crate::engine::SegmentSource;
        self.shared.lock().memory.page_mapping()
    }

    /// When dropped blocks may be reused.
    pub fn free_timing(&self) -> FreeTiming {
        self.shared.free_timing
    }

    /// The device.
    pub fn device(&self) -> &wgpu::Device {
        &self.shared.device
    }

    /// The queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.shared.queue
    }

    /// The device loss record the pool checks, if it has one
    /// ([`PoolOptions::with_error_log`]; pools made by [`from_context`](Pool::from_context)
    /// have their context's).
    pub fn error_log(&self) -> Option<&crate::gpu::ErrorLog> {
        self.shared.error_log.as_ref()
    }

    /// `Some` once the pool knows its device is lost: from then on its operations fail with
    /// this error. `None` while the device works, and always for a pool without an
    /// [`error_log`](Pool::error_log).
    pub fn device_lost(&self) -> Option<crate::gpu::DeviceLost> {
        self.shared.check_device().err()
    }

    /// Whether `block` was handed out by this pool (or a clone of it).
    pub fn owns(&self, block: &Block) -> bool {
        Arc::ptr_eq(block.shared(), &self.shared)
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

/// The residency manager of a new pool, its budget applied to the engine's cap; an error
/// where the pool cannot keep residency.
fn residents_for(
    residency: &ResidencyOptions,
    options: &PoolOptions,
    memory: &Backing,
    engine: &mut Engine,
    device_memory: Option<u64>,
    host_bindable: bool,
) -> Result<residents::Residents, PoolError> {
    let unavailable = |reason: String| Err(PoolError::ResidencyUnavailable { reason });
    if memory.mode() != MemoryMode::Pages {
        return unavailable(
            "the pool keeps fixed segments, and only a pool in pages mode can evict a block and \
             keep its address; on this device move blocks with Pool::offload and Pool::prefetch \
             (each move changes the block's generation)"
                .to_string(),
        );
    }
    if options.free_timing != FreeTiming::AfterSubmit {
        return unavailable(
            "residency needs FreeTiming::AfterSubmit, which tells which blocks recorded \
             commands may still use"
                .to_string(),
        );
    }
    let copies = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    if !options.usage.contains(copies) {
        return unavailable(format!(
            "evicting and restoring copy blocks, so the pool's usages need COPY_SRC and \
             COPY_DST (it has {:?})",
            options.usage
        ));
    }
    if !host_bindable {
        return unavailable(
            "evicted blocks are copied by DMA into host memory, which needs the device feature \
             MAPPABLE_PRIMARY_BUFFERS"
                .to_string(),
        );
    }
    let budget = [
        residency.device_budget,
        engine.memory_cap(),
        options.memory_budget,
        device_memory,
    ]
    .into_iter()
    .flatten()
    .min();
    let Some(budget) = budget else {
        return unavailable(
            "no device budget is known: give one with ResidencyOptions::with_device_budget"
                .to_string(),
        );
    };
    let budget = engine.limit_cap(budget);
    let host_limit = residency
        .host_limit
        .or_else(residency_options::default_host_limit);
    Ok(residents::Residents::new(budget, host_limit))
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
