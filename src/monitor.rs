//! Live memory monitoring: the adapter's memory heaps with their budget and usage
//! (`VK_EXT_memory_budget`), and a pool's own statistics, as one struct an application can
//! poll (what `wgpool info --watch` prints once a second).
//!
//! ```no_run
//! use wgpool::config::Config;
//! use wgpool::gpu::{GpuContext, HeadlessOptions};
//! use wgpool::monitor::MemoryReading;
//! use wgpool::pool::Pool;
//!
//! let gpu = GpuContext::headless(&HeadlessOptions::default())?;
//! let pool = Pool::from_context(&gpu, Config::default())?;
//! let _block = pool.alloc(1 << 20)?;
//! let report = MemoryReading::now(gpu.adapter(), Some(&pool));
//! let pool_stats = report.pool.unwrap();
//! assert_eq!(pool_stats.allocated_bytes, 1 << 20);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use serde::Serialize;

use crate::format::bytes;
use crate::gpu::DeviceMemoryInfo;
use crate::pool::Pool;

/// A pool's memory now, from its statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PoolMemory {
    /// Bytes used by live blocks.
    pub allocated_bytes: u64,
    /// Highest `allocated_bytes` since the last peak reset.
    pub peak_allocated_bytes: u64,
    /// Bytes of the pool's segments (device memory it holds).
    pub reserved_bytes: u64,
    /// Highest `reserved_bytes` since the last peak reset.
    pub peak_reserved_bytes: u64,
    /// Live segments.
    pub segments: u64,
    /// Live blocks.
    pub blocks: u64,
    /// Requests that failed with out-of-memory so far.
    pub num_ooms: u64,
}

impl PoolMemory {
    /// The figures of `pool`.
    pub fn of(pool: &Pool) -> PoolMemory {
        let stats = pool.memory_stats();
        PoolMemory {
            allocated_bytes: stats.allocated_bytes.all.current,
            peak_allocated_bytes: stats.allocated_bytes.all.peak,
            reserved_bytes: stats.reserved_bytes.all.current,
            peak_reserved_bytes: stats.reserved_bytes.all.peak,
            segments: stats.segment.all.current,
            blocks: stats.allocation.all.current,
            num_ooms: stats.num_ooms,
        }
    }
}

/// The device's memory and, when given, a pool's, at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryReading {
    /// Milliseconds since the Unix epoch when the report was taken.
    pub unix_ms: u64,
    /// The heaps, or `None` where the backend has no memory query (only Vulkan has one).
    pub memory: Option<DeviceMemoryInfo>,
    /// The pool's figures, when a pool was given.
    pub pool: Option<PoolMemory>,
}

impl MemoryReading {
    /// Reads the adapter's heaps and the pool's statistics now.
    pub fn now(adapter: &wgpu::Adapter, pool: Option<&Pool>) -> MemoryReading {
        MemoryReading {
            unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            memory: DeviceMemoryInfo::query(adapter),
            pool: pool.map(PoolMemory::of),
        }
    }

    /// The report as text lines: one per heap, then the pool's.
    pub fn render(&self) -> String {
        let mut out = String::new();
        match &self.memory {
            None => out
                .push_str("  memory heaps: not available (only the Vulkan backend reports them)\n"),
            Some(info) => {
                if !info.budget_supported {
                    out.push_str(
                        "  budget and usage: unavailable (the driver lacks VK_EXT_memory_budget)\n",
                    );
                }
                for (i, heap) in info.heaps.iter().enumerate() {
                    let kind = if heap.device_local {
                        "device-local"
                    } else {
                        "host"
                    };
                    out.push_str(&format!(
                        "  heap {i} {kind:<12} size {:>11}",
                        bytes(heap.size)
                    ));
                    if let (Some(budget), Some(usage)) = (heap.budget, heap.usage) {
                        let pct = if budget == 0 {
                            0.0
                        } else {
                            usage as f64 * 100.0 / budget as f64
                        };
                        out.push_str(&format!(
                            "  usage {:>11} of budget {:>11} ({pct:.1}%)",
                            bytes(usage),
                            bytes(budget)
                        ));
                    }
                    out.push('\n');
                }
            }
        }
        if let Some(pool) = &self.pool {
            out.push_str(&format!(
                "  pool: allocated {} (peak {}), reserved {} (peak {}), {}, {}, {}\n",
                bytes(pool.allocated_bytes),
                bytes(pool.peak_allocated_bytes),
                bytes(pool.reserved_bytes),
                bytes(pool.peak_reserved_bytes),
                crate::format::count(pool.segments, "segment", "segments"),
                crate::format::count(pool.blocks, "block", "blocks"),
                crate::format::count(pool.num_ooms, "OOM", "OOMs")
            ));
        }
        out
    }
}
