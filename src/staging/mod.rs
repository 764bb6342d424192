//! The host staging pool: cached, reused, mapped host buffers for fast uploads and
//! downloads, the analog of PyTorch's pinned-memory (host) caching allocator.
//!
//! wgpu's convenient paths (`queue.write_buffer`, map-and-read of a fresh buffer) create
//! and fault in new staging memory on every call and copy on one thread; they run 5 to 18
//! times below the PCIe limit. A [`StagingPool`] instead
//! - keeps staging buffers in size classes (powers of two from 64 KiB up to the chunk
//!   size; see [`size_class`]) and reuses them, so the page faults and wgpu's zero-fill of a
//!   fresh mapping are paid once per buffer, not per transfer;
//! - keeps upload buffers mapped between uses (they are mapped again with `map_async`
//!   after each GPU copy), and unmaps download buffers only while the GPU writes them;
//! - cuts large transfers into chunks ([`StagingOptions::chunk_size`]) and pipelines them,
//!   with up to [`StagingOptions::max_in_flight`] chunks in flight: the CPU fills (or
//!   drains) chunk k + 1 while the GPU copies chunk k;
//! - copies between user memory and mapped memory on several threads
//!   ([`StagingOptions::threads`]), one for small copies;
//! - offers [`StagingBuffer`] and [`ReadbackBuffer`], mapped memory the caller fills or
//!   reads in place, so that only the DMA remains.
//!
//! Where the memory lands (measured on an H200, see the design notes): upload buffers
//! (`MAP_WRITE | COPY_SRC`) sit in device memory behind the BAR, written by the CPU at 9 GB/s
//! per thread and 26 to 31 GB/s with 4 to 8 threads, copied to a block at over 300 GB/s;
//! download buffers (`MAP_READ | COPY_DST`) sit in cached host memory, filled by DMA at
//! about 50 GB/s.
//!
//! Measured with `bench::transfers` (the `wgpool bench` command) on an H200 (16 cores, 1 GiB
//! per transfer, default settings: 8 threads, 64 MiB chunks, 4 in flight): `upload` from a
//! slice 26.9 GB/s, `download_into` a pre-faulted slice 26.6 GB/s (30.3 with 16 MiB chunks),
//! a filled `StagingBuffer`'s upload 396 GB/s, a `ReadbackBuffer` download 52 GB/s;
//! against `queue.write_buffer` 3.5 GB/s and map-and-read of a fresh buffer 1.3 GB/s.
//!
//! # Reuse only after completion
//!
//! A staging buffer returns to the cache only after the GPU work that used it has
//! completed, and this holds by construction: after the copy that uses it is submitted, the
//! buffer is handed to a `map_async` whose callback (which wgpu runs only after every
//! submission using the buffer is done) puts it back in the cache. Until then no cache holds
//! it, so no later transfer can write into memory an upload in flight still reads, or reuse
//! memory a download in flight still fills. `device.poll` is only used to make wgpu run
//! callbacks (waiting on one specific submission when a caller must block); it never decides
//! reuse.
//!
//! # Ordering
//!
//! An upload call returns once every chunk is submitted: work submitted afterwards sees the
//! data (wgpu runs one queue in order). A non-blocking download captures the block as it is
//! after all work submitted before the call. A blocking [`download_into`] of more than
//! `max_in_flight` chunks submits later chunks while it runs, so it sees work submitted
//! before the call, and may or may not see work other threads submit during it.
//!
//! [`download_into`]: StagingPool::download_into
//!
//! # Example
//!
//! ```no_run
//! use wgpool::config::Config;
//! use wgpool::gpu::{GpuContext, HeadlessOptions};
//! use wgpool::pool::Pool;
//! use wgpool::staging::{StagingOptions, StagingPool};
//!
//! let gpu = GpuContext::headless(&HeadlessOptions::default())?;
//! let pool = Pool::from_context(&gpu, Config::default())?;
//! let staging = StagingPool::from_pool(&pool, StagingOptions::default())?;
//! let block = pool.alloc(256 << 20)?;
//! let data = vec![1u8; 256 << 20];
//! staging.upload(&block, &data)?; // chunked, pipelined, multi-threaded
//! let mut back = vec![0u8; 256 << 20];
//! staging.download_into(&block, &mut back)?;
//! assert_eq!(back, data);
//! let stats = staging.stats();
//! assert!(stats.total.buffers_created <= 2 * 4); // max_in_flight chunks per direction
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cache;
// Audited: copies between user memory and mapped staging memory on worker threads, with
// the lifetime rule written in the module.
#[allow(unsafe_code)]
mod copy_threads;
mod download;
mod error;
mod flight;
mod host_buffer;
mod options;
mod readback_buffer;
mod size_class;
mod staging_buffer;
mod staging_shared;
mod stats;
mod upload;

use std::collections::VecDeque;
use std::sync::Arc;

pub use download::DownloadTicket;
pub use error::StagingError;
pub use options::{
    DEFAULT_CHUNK_SIZE, DEFAULT_MAX_IN_FLIGHT, DEFAULT_MIN_BYTES_PER_THREAD, MAX_IN_FLIGHT,
    MAX_THREADS, StagingOptions, default_threads,
};
pub use readback_buffer::{ReadView, ReadbackBuffer};
pub use size_class::{MIN_CLASS, size_class};
pub use staging_buffer::{StagingBuffer, StagingWrite};
pub use stats::{HostMemoryStats, StagingStats};
pub use upload::UploadTicket;

use crate::pool::{Block, Pool};
use host_buffer::Kind;
use staging_shared::StagingShared;

/// A pool of cached host staging buffers for one device and queue. Cheap to clone: clones
/// share the cache, the copy threads and the statistics. `Send + Sync`; transfers from many
/// threads may run at once.
///
/// Transfers take [`Block`]s of any pool on the same device (the block's buffer needs
/// `COPY_DST` for uploads and `COPY_SRC` for downloads, as the default pool usage has).
#[derive(Clone)]
pub struct StagingPool {
    shared: Arc<StagingShared>,
}

impl StagingPool {
    /// A staging pool on `device` and `queue`. Fails with [`StagingError::Option`] when a
    /// setting is out of range for this device. It cannot see the device being lost; use
    /// [`from_context`](Self::from_context) or [`from_pool`](Self::from_pool) where you can.
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        options: StagingOptions,
    ) -> Result<StagingPool, StagingError> {
        StagingPool::build(device, queue, options, None)
    }

    /// A staging pool on a [`GpuContext`](crate::gpu::GpuContext)'s device that checks its
    /// [`errors`](crate::gpu::GpuContext::errors): once the device is lost, transfers fail
    /// with [`StagingError::DeviceLost`] instead of returning as if done (wgpu 30 drops
    /// the work of a lost device without an error).
    pub fn from_context(
        gpu: &crate::gpu::GpuContext,
        options: StagingOptions,
    ) -> Result<StagingPool, StagingError> {
        StagingPool::build(
            gpu.device(),
            gpu.queue(),
            options,
            Some(gpu.errors().clone()),
        )
    }

    /// A staging pool on the device and queue of `pool`, checking the device loss record the
    /// pool checks ([`PoolOptions::with_error_log`](crate::pool::PoolOptions::with_error_log)).
    pub fn from_pool(pool: &Pool, options: StagingOptions) -> Result<StagingPool, StagingError> {
        StagingPool::build(
            pool.device(),
            pool.queue(),
            options,
            pool.error_log().cloned(),
        )
    }

    fn build(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        options: StagingOptions,
        error_log: Option<crate::gpu::ErrorLog>,
    ) -> Result<StagingPool, StagingError> {
        Ok(StagingPool {
            shared: Arc::new(StagingShared::new(
                device.clone(),
                queue.clone(),
                options,
                error_log,
            )?),
        })
    }

    /// The settings.
    pub fn options(&self) -> &StagingOptions {
        &self.shared.options
    }

    /// Copies `data` into the start of `block` and waits until the GPU has finished the copy.
    ///
    /// `data` may be shorter than the block; then its length must be a multiple of 4
    /// ([`StagingError::Unaligned`]), and the block's bytes past it keep their values. A
    /// length equal to `block.size()` may be anything. Longer data is
    /// [`StagingError::TooLong`]. Bytes outside the block are never touched.
    pub fn upload(&self, block: &Block, data: &[u8]) -> Result<(), StagingError> {
        self.upload_async(block, data)?.wait()
    }

    /// Like [`upload`](Self::upload), but returns once the data is in staging memory and
    /// every copy is submitted, without waiting for the GPU. Work submitted afterwards sees
    /// the data; the ticket says when the GPU has finished, and `data` may be reused at once.
    pub fn upload_async(&self, block: &Block, data: &[u8]) -> Result<UploadTicket, StagingError> {
        upload::upload(&self.shared, block, data)
    }

    /// The block's `size()` bytes, after all work submitted before the call.
    pub fn download(&self, block: &Block) -> Result<Vec<u8>, StagingError> {
        let mut out = vec![0u8; block.size() as usize];
        self.download_into(block, &mut out)?;
        Ok(out)
    }

    /// Copies the first `dst.len()` bytes of `block` into `dst` (at most `block.size()`,
    /// else [`StagingError::BeyondBlock`]). Pipelined in chunks; see the module's notes on
    /// ordering. `dst` is best pre-faulted (written once) for the full rate.
    pub fn download_into(&self, block: &Block, dst: &mut [u8]) -> Result<(), StagingError> {
        download::download_into(&self.shared, block, dst)
    }

    /// Submits the download of the block's `size()` bytes, as they are after all work
    /// submitted before the call, and returns at once. The ticket's
    /// [`wait`](DownloadTicket::wait) delivers the bytes. It holds staging memory for the
    /// whole block until then.
    pub fn download_async(&self, block: &Block) -> Result<DownloadTicket, StagingError> {
        download::download_async(&self.shared, block)
    }

    /// A mapped upload buffer of `len` bytes for the caller to fill in place; from the cache
    /// when one of its size class is idle.
    pub fn alloc_staging_buffer(&self, len: u64) -> Result<StagingBuffer, StagingError> {
        let class = self.user_class(len)?;
        let staging = self
            .shared
            .acquire(Kind::Upload, class, &mut VecDeque::new())?;
        Ok(StagingBuffer::new(self.shared.clone(), staging, len))
    }

    /// Uploads `buffer`'s `len()` bytes into the start of `block` with one GPU copy; the same
    /// as [`StagingBuffer::upload_to`].
    pub fn upload_from(
        &self,
        buffer: &mut StagingBuffer,
        block: &Block,
    ) -> Result<(), StagingError> {
        buffer.upload_to(block)
    }

    /// A download buffer that holds up to `len` bytes, for the caller to read in place;
    /// from the cache when one of its size class is idle.
    pub fn alloc_readback_buffer(&self, len: u64) -> Result<ReadbackBuffer, StagingError> {
        let class = self.user_class(len)?;
        let staging = self
            .shared
            .acquire(Kind::Download, class, &mut VecDeque::new())?;
        Ok(ReadbackBuffer::new(self.shared.clone(), staging, len))
    }

    /// Submits the copy of `block`'s `size()` bytes, as they are after all work submitted
    /// before the call, into `buffer` and returns at once;
    /// [`ReadbackBuffer::view`] waits for them. The block may not be larger than the buffer
    /// ([`StagingError::TooLong`]). A download still in flight into `buffer` is finished
    /// first.
    pub fn download_to_readback(
        &self,
        block: &Block,
        buffer: &mut ReadbackBuffer,
    ) -> Result<(), StagingError> {
        buffer.download(block)
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> StagingStats {
        self.shared.counters.snapshot()
    }

    /// Sets every peak statistic to its current value.
    pub fn reset_peak_stats(&self) {
        self.shared.counters.reset_peaks();
    }

    /// Destroys every cached (idle) staging buffer. Buffers in flight or held by the caller
    /// are not affected.
    pub fn empty_cache(&self) {
        self.shared.empty_cache();
    }

    /// The class of a user staging buffer of `len` bytes, within the device's limit.
    fn user_class(&self, len: u64) -> Result<u64, StagingError> {
        let limit = self.shared.max_buffer_size;
        let class = size_class(len, self.shared.options.chunk_size);
        if class <= limit {
            return Ok(class);
        }
        let exact = len.div_ceil(4) * 4;
        if exact <= limit {
            Ok(exact)
        } else {
            Err(StagingError::TooLarge { size: len, limit })
        }
    }
}

impl std::fmt::Debug for StagingPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stats = self.stats();
        f.debug_struct("StagingPool")
            .field("options", &self.shared.options)
            .field("allocated_bytes", &stats.total.allocated_bytes)
            .field("cached_bytes", &stats.total.cached_bytes)
            .finish()
    }
}
