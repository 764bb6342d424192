//! Allocation latency: pool alloc + free of a cached block against `create_buffer` + drop of
//! the same size, measured side by side in one run.

use std::time::Instant;

use serde::Serialize;

use crate::bench::timing::median;

use crate::config::Config;
use crate::gpu::GpuContext;
use crate::pool::{DEFAULT_USAGE, Pool, PoolError};

/// The `alloc` section of `wgpool bench --json`.
#[derive(Debug, Clone, Serialize)]
pub struct AllocLatency {
    /// Block size measured, in bytes.
    pub size_bytes: u64,
    /// Median ns of one `Pool::alloc` + drop of a block whose segment is cached.
    pub pool_ns: f64,
    /// Median ns of one `create_buffer` + drop, with wgpu's deferred destruction (the next
    /// `poll`) included.
    pub create_buffer_ns: f64,
    /// `create_buffer_ns / pool_ns`.
    pub speedup: f64,
    /// Median ns of `create_buffer` + drop without the deferred destruction, for reference.
    pub create_buffer_without_destroy_ns: f64,
    /// Operations per timed batch.
    pub batch: u32,
    /// Timed batches (the median is over these).
    pub batches: u32,
}

/// Measures alloc latency for blocks of `size` bytes: `batches` batches of `batch`
/// operations each, after one warm-up batch, for the pool and for `create_buffer`.
///
/// Batches of the two kinds alternate, so that drift of the machine affects both alike.
pub fn measure(
    gpu: &GpuContext,
    size: u64,
    batch: u32,
    batches: u32,
) -> Result<AllocLatency, PoolError> {
    let pool = Pool::from_context(gpu, Config::default())?;
    drop(
        pool.alloc(size)
            .expect("a first block of the benchmark size fits on the device"),
    );
    let device = gpu.device();
    let descriptor = wgpu::BufferDescriptor {
        label: Some("wgpool bench create_buffer"),
        size,
        usage: DEFAULT_USAGE,
        mapped_at_creation: false,
    };
    let time_pool = || {
        let start = Instant::now();
        for _ in 0..batch {
            let block = pool
                .alloc(size)
                .expect("the cached segment serves the block");
            drop(std::hint::black_box(block));
        }
        start.elapsed().as_nanos() as f64 / batch as f64
    };
    let time_create = |include_destroy: bool| {
        let start = Instant::now();
        for _ in 0..batch {
            let buffer = device.create_buffer(&descriptor);
            drop(std::hint::black_box(buffer));
        }
        if include_destroy {
            let _ = device.poll(wgpu::PollType::wait_indefinitely());
        }
        let elapsed = start.elapsed().as_nanos() as f64 / batch as f64;
        if !include_destroy {
            let _ = device.poll(wgpu::PollType::wait_indefinitely());
        }
        elapsed
    };
    time_pool();
    time_create(true);
    let (mut pool_samples, mut create_samples, mut bare_samples) =
        (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..batches.max(1) {
        pool_samples.push(time_pool());
        create_samples.push(time_create(true));
        bare_samples.push(time_create(false));
    }
    let pool_ns = median(&pool_samples);
    let create_buffer_ns = median(&create_samples);
    Ok(AllocLatency {
        size_bytes: size,
        pool_ns,
        create_buffer_ns,
        speedup: create_buffer_ns / pool_ns,
        create_buffer_without_destroy_ns: median(&bare_samples),
        batch,
        batches: batches.max(1),
    })
}
