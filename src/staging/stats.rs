//! Statistics of the staging pool, in the spirit of PyTorch's host (pinned) allocator stats.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Memory statistics of one kind of staging buffer (upload or download), or of both.
///
/// PyTorch's `host_memory_stats()` names in brackets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HostMemoryStats {
    /// Bytes in staging buffers that exist now: cached, in flight or held by the user
    /// (`allocated_bytes.current`; here every buffer is a whole allocation).
    pub allocated_bytes: u64,
    /// Highest `allocated_bytes` since creation or [`reset_peak_stats`](super::StagingPool::reset_peak_stats).
    pub peak_allocated_bytes: u64,
    /// Bytes in idle staging buffers waiting in the cache for reuse.
    pub cached_bytes: u64,
    /// Staging buffers that exist now (`segment.current`).
    pub buffers: u64,
    /// Staging buffers created in total (`num_host_alloc`).
    pub buffers_created: u64,
    /// Staging buffers destroyed in total (`num_host_free`).
    pub buffers_destroyed: u64,
    /// Times a cached staging buffer served a request instead of a new one being created.
    pub reuse_count: u64,
}

impl HostMemoryStats {
    fn plus(self, other: HostMemoryStats) -> HostMemoryStats {
        HostMemoryStats {
            allocated_bytes: self.allocated_bytes + other.allocated_bytes,
            peak_allocated_bytes: self.peak_allocated_bytes + other.peak_allocated_bytes,
            cached_bytes: self.cached_bytes + other.cached_bytes,
            buffers: self.buffers + other.buffers,
            buffers_created: self.buffers_created + other.buffers_created,
            buffers_destroyed: self.buffers_destroyed + other.buffers_destroyed,
            reuse_count: self.reuse_count + other.reuse_count,
        }
    }
}

/// A snapshot of [`StagingPool::stats`](super::StagingPool::stats).
///
/// Counters only grow, except the current values (`allocated_bytes`, `cached_bytes`,
/// `buffers`). Fields may be added; it serializes with serde.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StagingStats {
    /// Upload (`MAP_WRITE | COPY_SRC`) staging buffers.
    pub upload: HostMemoryStats,
    /// Download (`MAP_READ | COPY_DST`) staging buffers.
    pub download: HostMemoryStats,
    /// Both kinds together. `peak_allocated_bytes` here is the sum of the two peaks, an upper
    /// bound of the joint peak.
    pub total: HostMemoryStats,
    /// Bytes copied from the host into blocks.
    pub bytes_uploaded: u64,
    /// Bytes copied from blocks to the host.
    pub bytes_downloaded: u64,
    /// Upload calls (from slices and from staging buffers).
    pub uploads: u64,
    /// Download calls (into slices and into readback buffers).
    pub downloads: u64,
    /// Staging chunks submitted, both directions.
    pub chunks: u64,
}

/// Live counters of one kind.
#[derive(Default)]
pub(crate) struct KindCounters {
    allocated_bytes: AtomicU64,
    peak_allocated_bytes: AtomicU64,
    cached_bytes: AtomicU64,
    buffers: AtomicU64,
    buffers_created: AtomicU64,
    buffers_destroyed: AtomicU64,
    reuse_count: AtomicU64,
}

impl KindCounters {
    pub fn created(&self, size: u64) {
        let now = self.allocated_bytes.fetch_add(size, Ordering::AcqRel) + size;
        self.peak_allocated_bytes.fetch_max(now, Ordering::AcqRel);
        self.buffers.fetch_add(1, Ordering::AcqRel);
        self.buffers_created.fetch_add(1, Ordering::AcqRel);
    }

    pub fn destroyed(&self, size: u64) {
        self.allocated_bytes.fetch_sub(size, Ordering::AcqRel);
        self.buffers.fetch_sub(1, Ordering::AcqRel);
        self.buffers_destroyed.fetch_add(1, Ordering::AcqRel);
    }

    pub fn cached(&self, size: u64) {
        self.cached_bytes.fetch_add(size, Ordering::AcqRel);
    }

    pub fn uncached(&self, size: u64) {
        self.cached_bytes.fetch_sub(size, Ordering::AcqRel);
    }

    pub fn cached_bytes(&self) -> u64 {
        self.cached_bytes.load(Ordering::Acquire)
    }

    pub fn reused(&self) {
        self.reuse_count.fetch_add(1, Ordering::AcqRel);
    }

    fn snapshot(&self) -> HostMemoryStats {
        HostMemoryStats {
            allocated_bytes: self.allocated_bytes.load(Ordering::Acquire),
            peak_allocated_bytes: self.peak_allocated_bytes.load(Ordering::Acquire),
            cached_bytes: self.cached_bytes.load(Ordering::Acquire),
            buffers: self.buffers.load(Ordering::Acquire),
            buffers_created: self.buffers_created.load(Ordering::Acquire),
            buffers_destroyed: self.buffers_destroyed.load(Ordering::Acquire),
            reuse_count: self.reuse_count.load(Ordering::Acquire),
        }
    }

    fn reset_peak(&self) {
        self.peak_allocated_bytes.store(
            self.allocated_bytes.load(Ordering::Acquire),
            Ordering::Release,
        );
    }
}

/// Every live counter of a pool. Shared with each staging buffer, so that a buffer's
/// destruction is counted wherever it happens.
#[derive(Default)]
pub(crate) struct Counters {
    pub upload: KindCounters,
    pub download: KindCounters,
    bytes_uploaded: AtomicU64,
    bytes_downloaded: AtomicU64,
    uploads: AtomicU64,
    downloads: AtomicU64,
    chunks: AtomicU64,
}

impl Counters {
    pub fn uploaded(&self, bytes: u64) {
        self.bytes_uploaded.fetch_add(bytes, Ordering::AcqRel);
        self.uploads.fetch_add(1, Ordering::AcqRel);
    }

    pub fn downloaded(&self, bytes: u64) {
        self.bytes_downloaded.fetch_add(bytes, Ordering::AcqRel);
        self.downloads.fetch_add(1, Ordering::AcqRel);
    }

    pub fn chunk(&self) {
        self.chunks.fetch_add(1, Ordering::AcqRel);
    }

    pub fn snapshot(&self) -> StagingStats {
        let upload = self.upload.snapshot();
        let download = self.download.snapshot();
        StagingStats {
            upload,
            download,
            total: upload.plus(download),
            bytes_uploaded: self.bytes_uploaded.load(Ordering::Acquire),
            bytes_downloaded: self.bytes_downloaded.load(Ordering::Acquire),
            uploads: self.uploads.load(Ordering::Acquire),
            downloads: self.downloads.load(Ordering::Acquire),
            chunks: self.chunks.load(Ordering::Acquire),
        }
    }

    pub fn reset_peaks(&self) {
        self.upload.reset_peak();
        self.download.reset_peak();
    }
}
