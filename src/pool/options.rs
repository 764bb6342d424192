//! Settings of a pool beyond `WGPOOL_CONF`: [`PoolOptions`] and [`FreeTiming`].

use super::residency_options::ResidencyOptions;
use crate::gpu::ErrorLog;
use crate::gpu::sparse::ChunkPolicy;

/// The default usages of pool segments.
pub const DEFAULT_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// When the memory of a dropped [`Block`](super::Block) may serve another request.
///
/// A block whose binding, operand, slice or buffer was taken may be named by commands that
/// are recorded but not submitted yet. wgpu runs work in submission order, so if the memory
/// went to a new block at once, anything submitted for the new block before those commands
/// (a [`Pool::write`](super::Pool::write), or another encoder) would run first and change the
/// bytes the recorded commands were meant to read.
///
/// # Threads
///
/// Each thread records on its own. A thread's **recording** opens when it first exposes a
/// block (takes a binding, operand, slice or buffer, or records a
/// [`PoolBindGroup`](super::PoolBindGroup) or `kernels::PreparedKernel`)
/// and closes at that thread's next submission point: [`Pool::submit`](super::Pool::submit),
/// [`Pool::mark_submitted`](super::Pool::mark_submitted) or
/// [`mark_submitted`](super::mark_submitted)`(&device)`, through any pool of the device. A
/// dropped block is held back until every recording that exposed it is closed, whichever
/// thread submits first. So threads that each record and submit their own encoders need
/// nothing more. When one thread records and another submits:
/// - hand the recording over with [`Pool::take_recording`](super::Pool::take_recording) and
///   drop the [`Recording`](super::Recording) after submitting, or
/// - call [`Pool::mark_all_submitted`](super::Pool::mark_all_submitted) once everything
///   recorded so far, on every thread, is submitted.
///
/// A recording that is never closed holds back every block it exposed; past the held limit
/// ([`PoolOptions::with_held_limit`]) the pool says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FreeTiming {
    /// The default. A block dropped while a recording that exposed it (took its binding,
    /// operand, slice or buffer) is open is held back: it stays allocated until that
    /// recording's thread reaches a submission point (see Threads above). Blocks that were
    /// never exposed, or only by recordings already submitted, return at once.
    #[default]
    AfterSubmit,
    /// Every dropped block returns at once. For applications that drop blocks only after
    /// submitting the commands that use them (the rule PyTorch's stream semantics imply);
    /// dropping one earlier lets later work overwrite what the recorded commands read.
    AtDrop,
}

/// What a pool does when the bytes of dropped blocks held back for unsubmitted recordings
/// pass its held limit ([`PoolOptions::with_held_limit`]). Held bytes grow without bound when
/// an application exposes blocks (takes bindings) and never reaches a submission point; the
/// limit turns that into a message that names the missing submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HeldLimitAction {
    /// No check.
    Off,
    /// The default: log a warning through the `log` crate, once until held bytes fall under
    /// half the limit again.
    #[default]
    Warn,
    /// Warn, and refuse allocations with
    /// [`AllocError::HeldForSubmission`](crate::engine::AllocError::HeldForSubmission) while
    /// held bytes are over the limit.
    Error,
}

/// The held limit when none is given: a quarter of the pool's cap, else of the device's
/// memory, at least 64 MiB; 1 GiB when neither is known.
pub(crate) fn default_held_limit(cap: Option<u64>, device_memory: Option<u64>) -> u64 {
    match cap.or(device_memory) {
        Some(bytes) => (bytes / 4).max(64 << 20),
        None => 1 << 30,
    }
}

/// Settings of a pool beyond `WGPOOL_CONF`, built with the `with_*` methods:
///
/// ```
/// use wgpool::pool::{FreeTiming, PoolOptions};
/// let options = PoolOptions::default()
///     .with_usage(wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST)
///     .with_label("uniforms")
///     .with_free_timing(FreeTiming::AtDrop);
/// assert_eq!(options.label(), "uniforms");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PoolOptions {
    pub(crate) usage: wgpu::BufferUsages,
    pub(crate) label: String,
    pub(crate) device_memory: Option<u64>,
    pub(crate) free_timing: FreeTiming,
    pub(crate) log_leaks: bool,
    pub(crate) chunk_policy: ChunkPolicy,
    pub(crate) held_limit: Option<u64>,
    pub(crate) held_limit_action: HeldLimitAction,
    pub(crate) residency: Option<ResidencyOptions>,
    /// The device's `VK_EXT_memory_budget` budget, read by `Pool::from_context`.
    pub(crate) memory_budget: Option<u64>,
    pub(crate) error_log: Option<ErrorLog>,
    pub(crate) owner_bias: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            usage: DEFAULT_USAGE,
            label: "wgpool".to_string(),
            device_memory: None,
            free_timing: FreeTiming::default(),
            log_leaks: false,
            chunk_policy: ChunkPolicy::default(),
            held_limit: None,
            held_limit_action: HeldLimitAction::default(),
            residency: None,
            memory_budget: None,
            error_log: None,
            owner_bias: true,
        }
    }
}

impl PoolOptions {
    /// Usages of every segment buffer (default [`DEFAULT_USAGE`]). A pool serves one usage
    /// set; make one pool per set (storage, uniform, vertex, index, indirect). Each pool keeps
    /// its own cap. [`Pool::read`](super::Pool::read) needs `COPY_SRC`,
    /// [`Pool::write`](super::Pool::write) `COPY_DST`.
    pub fn with_usage(mut self, usage: wgpu::BufferUsages) -> Self {
        self.usage = usage;
        self
    }

    /// Label prefix of the segment buffers (default `wgpool`).
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Device memory in bytes for `per_process_memory_fraction`. Without it the pool reads
    /// the size from the device (Vulkan memory heaps); set it where the backend cannot
    /// report it.
    pub fn with_device_memory(mut self, bytes: u64) -> Self {
        self.device_memory = Some(bytes);
        self
    }

    /// When dropped blocks may be reused (default [`FreeTiming::AfterSubmit`]).
    pub fn with_free_timing(mut self, timing: FreeTiming) -> Self {
        self.free_timing = timing;
        self
    }

    /// A debug setting: when the last `Pool` handle drops while blocks are still allocated,
    /// log [`Pool::leak_report`](super::Pool::leak_report) at `warn` level through the
    /// `log` crate (default off). Blocks may outlive the pool; this names the ones that do.
    pub fn with_log_leaks(mut self, log_leaks: bool) -> Self {
        self.log_leaks = log_leaks;
        self
    }

    /// How a pool in pages mode sizes its `VkDeviceMemory` chunks (default
    /// [`ChunkPolicy::default`]): larger chunks take fewer driver calls and leave more device
    /// memory unbound. Pools with fixed segments ignore it.
    pub fn with_chunk_policy(mut self, policy: ChunkPolicy) -> Self {
        self.chunk_policy = policy;
        self
    }

    /// The bound on bytes of dropped blocks held back for unsubmitted recordings (default: a
    /// quarter of the pool's cap, else of the device's memory, at least 64 MiB; 1 GiB when
    /// neither is known), and what passing it does (default [`HeldLimitAction::Warn`]).
    pub fn with_held_limit(mut self, bytes: u64, action: HeldLimitAction) -> Self {
        self.held_limit = Some(bytes);
        self.held_limit_action = action;
        self
    }

    /// What passing the held limit does, keeping the limit's bytes.
    pub fn with_held_limit_action(mut self, action: HeldLimitAction) -> Self {
        self.held_limit_action = action;
        self
    }

    /// Turns on residency: when the pool's blocks do not fit the device budget, it evicts
    /// the least recently used ones to host memory and brings them back when they are used
    /// (default off).
    ///
    /// Guarantees:
    /// - an evicted block keeps its buffer and offset: bind groups that name it stay valid,
    ///   and its next use (a binding or operand taken, a [`PoolBindGroup`](super::PoolBindGroup)
    ///   recorded, [`Pool::read`](super::Pool::read) or [`Pool::write`](super::Pool::write),
    ///   [`Pool::make_resident`](super::Pool::make_resident) or
    ///   [`Pool::submit_using`](super::Pool::submit_using)) brings it back with its contents;
    /// - a block is never evicted while pinned, while a recording not yet submitted may name
    ///   it, or while the pool's own transfers use it;
    /// - evicting fails with an error, and loses nothing, once the host limit is reached.
    ///
    /// Only blocks with a whole page of their own are evicted (smaller ones stay on the
    /// device). Needs a pool in pages mode (pages mode), [`FreeTiming::AfterSubmit`], the
    /// `COPY_SRC` and `COPY_DST` usages, and the device feature `MAPPABLE_PRIMARY_BUFFERS`;
    /// elsewhere creating the pool fails with
    /// [`PoolError::ResidencyUnavailable`](super::PoolError::ResidencyUnavailable). A wgpu
    /// bind group built by hand from [`Block::binding`](super::Block::binding) and recorded
    /// again later is not seen: list its blocks in `submit_using`.
    pub fn with_residency(mut self, residency: ResidencyOptions) -> Self {
        self.residency = Some(residency);
        self
    }

    /// The record of the device's loss that the pool checks (default none;
    /// [`Pool::from_context`](super::Pool::from_context) gives the context's
    /// [`GpuContext::errors`](crate::gpu::GpuContext::errors)).
    ///
    /// With it, once the device is lost every allocation, [`Pool::write`](super::Pool::write),
    /// [`Pool::read`](super::Pool::read), move and residency operation fails with a
    /// [`DeviceLost`](crate::gpu::DeviceLost) error, and a write whose submission lost the
    /// device returns that error rather than `Ok`. Without it the pool cannot tell: wgpu 30
    /// has no query for a lost device and silently drops the work submitted to one. An
    /// application with its own device-lost callback calls
    /// [`ErrorLog::record_device_lost`] from it.
    pub fn with_error_log(mut self, log: ErrorLog) -> Self {
        self.error_log = Some(log);
        self
    }

    /// The record of device loss the pool checks, if given.
    pub fn error_log(&self) -> Option<&ErrorLog> {
        self.error_log.as_ref()
    }

    /// Whether the pool's first thread takes its locks without locked instructions until
    /// another thread uses the pool (default `true`).
    ///
    /// With the bias, the thread that first allocates, frees or otherwise uses the pool
    /// enters the pool's lock and its reuse cache with plain loads and stores: an allocation
    /// and a free that the engine serves cost no locked read-modify-write (about 40 ns
    /// together on a server CPU where each such instruction costs 10 ns or more). The first
    /// use from any other thread (a block dropped there, a submission point there) revokes
    /// the bias for good, once, at the cost of one `membarrier` system call and of waiting
    /// for the owner to leave the lock; every thread then takes the locks as without the
    /// bias. It needs Linux's `membarrier` (4.14 or later); elsewhere, or with `false`, the
    /// pool takes its locks on every thread. Results never depend on it.
    pub fn with_owner_bias(mut self, owner_bias: bool) -> Self {
        self.owner_bias = owner_bias;
        self
    }

    /// Whether the owner bias is asked for ([`with_owner_bias`](Self::with_owner_bias)).
    pub fn owner_bias(&self) -> bool {
        self.owner_bias
    }

    /// The residency options, if residency is on.
    pub fn residency(&self) -> Option<&ResidencyOptions> {
        self.residency.as_ref()
    }

    /// The held limit given, if any (`None`: the default).
    pub fn held_limit(&self) -> Option<u64> {
        self.held_limit
    }

    /// What passing the held limit does.
    pub fn held_limit_action(&self) -> HeldLimitAction {
        self.held_limit_action
    }

    /// The segment usages.
    pub fn usage(&self) -> wgpu::BufferUsages {
        self.usage
    }

    /// The label prefix.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The device memory size given, if any.
    pub fn device_memory(&self) -> Option<u64> {
        self.device_memory
    }

    /// When dropped blocks may be reused.
    pub fn free_timing(&self) -> FreeTiming {
        self.free_timing
    }

    /// Whether leaks are logged when the last `Pool` handle drops.
    pub fn log_leaks(&self) -> bool {
        self.log_leaks
    }

    /// The chunk policy of pages-mode memory.
    pub fn chunk_policy(&self) -> ChunkPolicy {
        self.chunk_policy
    }
}
