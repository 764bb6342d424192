//! Settings of a [`StagingPool`](super::StagingPool).

use serde::Serialize;

use super::error::StagingError;
use super::size_class::MIN_CLASS;

/// Default [`StagingOptions::chunk_size`]: 64 MiB.
pub const DEFAULT_CHUNK_SIZE: u64 = 64 << 20;
/// Default [`StagingOptions::max_in_flight`].
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4;
/// Default [`StagingOptions::min_bytes_per_thread`]: 1 MiB.
pub const DEFAULT_MIN_BYTES_PER_THREAD: u64 = 1 << 20;
/// Most copy threads a pool may have.
pub const MAX_THREADS: usize = 256;
/// Most chunks one transfer may keep in flight.
pub const MAX_IN_FLIGHT: usize = 1024;

/// How a [`StagingPool`](super::StagingPool) cuts, pipelines and copies transfers.
///
/// `Default` gives 64 MiB chunks, 4 chunks in flight per transfer, copy threads
/// `min(available_parallelism, 8)`, one thread for copies under 2 MiB, and an unlimited
/// cache. [`StagingPool::new`](super::StagingPool::new) checks every field and names the
/// first that is out of range.
///
/// ```
/// use wgpool::staging::StagingOptions;
/// let options = StagingOptions::default()
///     .with_chunk_size(16 << 20)
///     .with_threads(2)
///     .with_max_cached_bytes(256 << 20);
/// assert_eq!(options.chunk_size, 16 << 20);
/// assert!(options.validate(1 << 30).is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StagingOptions {
    /// Bytes per staging chunk of a large transfer. A power of two, at least 64 KiB and at
    /// most the device's `max_buffer_size`. Transfers up to this size use one staging buffer
    /// of the next power of two (at least 64 KiB); larger ones are cut into chunks of exactly
    /// this size and pipelined.
    pub chunk_size: u64,
    /// Chunks one transfer keeps in flight (1 to 1024): the CPU fills or drains one while the
    /// GPU copies the others. A blocking transfer uses at most this many staging chunks.
    pub max_in_flight: usize,
    /// Threads that copy between user memory and mapped staging memory, the calling thread
    /// included (1 to 256). 1 copies on the calling thread only.
    pub threads: usize,
    /// A copy uses one thread per this many bytes, up to `threads`: copies shorter than
    /// twice this run on one thread. At least 4 KiB.
    pub min_bytes_per_thread: u64,
    /// Cached (idle) staging bytes beyond which a returned staging buffer is destroyed
    /// instead of cached. `None`: no limit (like PyTorch's host allocator).
    pub max_cached_bytes: Option<u64>,
}

impl Default for StagingOptions {
    fn default() -> StagingOptions {
        StagingOptions {
            chunk_size: DEFAULT_CHUNK_SIZE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            threads: default_threads(),
            min_bytes_per_thread: DEFAULT_MIN_BYTES_PER_THREAD,
            max_cached_bytes: None,
        }
    }
}

/// `min(available_parallelism, 8)`: BAR writes on an H200 scale to about 4 to 8 threads and
/// no further.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8)
}

impl StagingOptions {
    /// Bytes per staging chunk (see [`chunk_size`](Self::chunk_size)).
    pub fn with_chunk_size(mut self, bytes: u64) -> Self {
        self.chunk_size = bytes;
        self
    }

    /// Chunks one transfer keeps in flight (see [`max_in_flight`](Self::max_in_flight)).
    pub fn with_max_in_flight(mut self, chunks: usize) -> Self {
        self.max_in_flight = chunks;
        self
    }

    /// Copy threads, the calling thread included (see [`threads`](Self::threads)).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Bytes per copy thread (see [`min_bytes_per_thread`](Self::min_bytes_per_thread)).
    pub fn with_min_bytes_per_thread(mut self, bytes: u64) -> Self {
        self.min_bytes_per_thread = bytes;
        self
    }

    /// Caches at most `bytes` of idle staging memory (see
    /// [`max_cached_bytes`](Self::max_cached_bytes)).
    pub fn with_max_cached_bytes(mut self, bytes: u64) -> Self {
        self.max_cached_bytes = Some(bytes);
        self
    }

    /// Checks every field against the device's `max_buffer_size`.
    ///
    /// ```
    /// use wgpool::staging::StagingOptions;
    /// let options = StagingOptions::default().with_chunk_size(3 << 20);
    /// let error = options.validate(1 << 30).unwrap_err();
    /// assert!(error.to_string().contains("chunk_size"));
    /// assert!(StagingOptions::default().validate(1 << 30).is_ok());
    /// ```
    pub fn validate(&self, max_buffer_size: u64) -> Result<(), StagingError> {
        if !self.chunk_size.is_power_of_two()
            || self.chunk_size < MIN_CLASS
            || self.chunk_size > max_buffer_size
        {
            return Err(StagingError::Option {
                name: "chunk_size",
                value: self.chunk_size.to_string(),
                allowed: format!(
                    "a power of two from {MIN_CLASS} (64 KiB) to the device's max_buffer_size \
                     {max_buffer_size}"
                ),
            });
        }
        if self.max_in_flight == 0 || self.max_in_flight > MAX_IN_FLIGHT {
            return Err(StagingError::Option {
                name: "max_in_flight",
                value: self.max_in_flight.to_string(),
                allowed: format!("1 to {MAX_IN_FLIGHT}"),
            });
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(StagingError::Option {
                name: "threads",
                value: self.threads.to_string(),
                allowed: format!("1 to {MAX_THREADS}"),
            });
        }
        if self.min_bytes_per_thread < 4096 {
            return Err(StagingError::Option {
                name: "min_bytes_per_thread",
                value: self.min_bytes_per_thread.to_string(),
                allowed: "at least 4096".into(),
            });
        }
        Ok(())
    }
}
