//! Settings of a pool beyond `WGPOOL_CONF`: [`PoolOptions`] and [`FreeTiming`].

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FreeTiming {
    /// The default. A block dropped after it was exposed (its binding, operand, slice or
    /// buffer taken) since the pool's last submission point is held back: it stays allocated
    /// until [`Pool::submit`](super::Pool::submit) or
    /// [`Pool::mark_submitted`](super::Pool::mark_submitted) says that the commands recorded
    /// so far are submitted. Blocks that were never exposed, or only before the last
    /// submission point, return at once.
    #[default]
    AfterSubmit,
    /// Every dropped block returns at once. For applications that drop blocks only after
    /// submitting the commands that use them (the rule PyTorch's stream semantics imply);
    /// dropping one earlier lets later work overwrite what the recorded commands read.
    AtDrop,
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

    /// How a page-mapped pool sizes its `VkDeviceMemory` chunks (default
    /// [`ChunkPolicy::default`]): larger chunks take fewer driver calls and leave more device
    /// memory unbound. Pools with fixed segments ignore it.
    pub fn with_chunk_policy(mut self, policy: ChunkPolicy) -> Self {
        self.chunk_policy = policy;
        self
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

    /// The chunk policy of page-mapped memory.
    pub fn chunk_policy(&self) -> ChunkPolicy {
        self.chunk_policy
    }
}
