//! Allocation latency: pool alloc + free of a cached block against `create_buffer` + drop of
//! the same size, measured side by side in one run; and, for each memory mode the device
//! offers, the pool's time per operation on a real trace's mix of sizes against its engine
//! alone on the same operations.

use std::time::Instant;

use serde::Serialize;

use crate::bench::timing::median;
use crate::config::Config;
use crate::gpu::GpuContext;
use crate::pool::{DEFAULT_USAGE, MemoryMode, Pool, PoolError};
use crate::trace::{
    GpuReplayError, GpuReplayOptions, ReadOptions, Trace, read_trace_from, replay_on_gpu,
};

/// The `alloc` section of `wgpool bench --json`.
#[derive(Debug, Clone, Serialize)]
pub struct AllocLatency {
    /// Block size measured, in bytes.
    pub size_bytes: u64,
    /// Median ns of one `Pool::alloc` + drop of a block whose segment is cached, under the
    /// default configuration.
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
    /// One row per memory mode the device offers.
    pub rows: Vec<AllocRow>,
}

/// The pool in one memory mode: a cached block, and a real trace's mix of sizes.
#[derive(Debug, Clone, Serialize)]
pub struct AllocRow {
    /// `pages` or `segments`.
    pub mode: MemoryMode,
    /// The configuration, in `WGPOOL_CONF` syntax.
    pub conf: String,
    /// Median ns of one `Pool::alloc` + drop of a cached block of `size_bytes`.
    pub cached_ns: f64,
    /// The trace replayed for the mix of sizes ([`TRACE_NAME`]).
    pub trace: &'static str,
    /// Its operations.
    pub ops: u64,
    /// The divisor applied to its sizes, so that it fits the device.
    pub scale: u64,
    /// Replays of it through one pool in each of the two measurements below.
    pub runs: u32,
    /// The pool's time per operation outside driver calls, the median of the runs after
    /// the first, the cache released between runs (`replay --gpu --repeat`'s
    /// `rest_median.pool_ns_per_op`): every run starts from an empty cache, so it includes
    /// the pool's work around the driver calls of its misses.
    pub pool_ns_per_op: f64,
    /// The engine alone on the same operations (`replay --gpu`'s `engine_ns_per_op`).
    pub engine_ns_per_op: f64,
    /// `pool_ns_per_op / engine_ns_per_op`.
    pub pool_over_engine: f64,
    /// The same with the cache kept between runs (`replay --gpu --repeat --keep-cache`):
    /// the runs after the first reuse cached memory, so nearly every allocation and free
    /// needs no driver call: the pool's hot path, which wgpool aims to keep within 1.5x of
    /// the engine alone.
    pub hot_pool_ns_per_op: f64,
    /// The engine alone, measured again beside the hot runs (the same trace and
    /// configuration as `engine_ns_per_op`, so the two differ only by the machine's noise).
    pub hot_engine_ns_per_op: f64,
    /// `hot_pool_ns_per_op / hot_engine_ns_per_op`.
    pub hot_pool_over_engine: f64,
}

/// The trace whose mix of sizes the rows replay: GPT-2 small trained for 8 steps on an
/// H200 (`tests/data/gpt2-train.csv`, 17,479 operations from 4 B to 785 MiB).
pub const TRACE_NAME: &str = "gpt2-train";
const TRACE: &str = include_str!("../../tests/data/gpt2-train.csv");

/// Why the allocation measurements stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllocBenchError {
    /// A pool could not be made.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A block of the benchmark size could not be allocated.
    #[error("a block of {size} bytes: {source}")]
    Alloc {
        /// The size asked for.
        size: u64,
        /// The pool's error.
        #[source]
        source: Box<crate::engine::AllocError>,
    },
    /// The trace replay failed.
    #[error("replaying {TRACE_NAME}: {0}")]
    Replay(#[from] GpuReplayError),
}

/// Measures alloc latency for blocks of `size` bytes: `batches` batches of `batch`
/// operations each, after one warm-up batch, for the pool and for `create_buffer`; then one
/// row per memory mode the device offers, with the embedded trace replayed `runs` times (at
/// least 2; `runs` 0 measures no rows).
///
/// Batches of the two kinds alternate, so that drift of the machine affects both alike.
pub fn measure(
    gpu: &GpuContext,
    size: u64,
    batch: u32,
    batches: u32,
    runs: u32,
) -> Result<AllocLatency, AllocBenchError> {
    let pool = Pool::from_context(gpu, Config::default())?;
    let device = gpu.device();
    let descriptor = wgpu::BufferDescriptor {
        label: Some("wgpool bench create_buffer"),
        size,
        usage: DEFAULT_USAGE,
        mapped_at_creation: false,
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
    let mut time_pool = cached_timer(&pool, size, batch)?;
    time_pool()?;
    time_create(true);
    let (mut pool_samples, mut create_samples, mut bare_samples) =
        (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..batches.max(1) {
        pool_samples.push(time_pool()?);
        create_samples.push(time_create(true));
        bare_samples.push(time_create(false));
    }
    drop(time_pool);
    let pool_ns = median(&pool_samples);
    let create_buffer_ns = median(&create_samples);
    let mut modes = vec![pool.memory_mode()];
    drop(pool);
    if modes[0] == MemoryMode::Pages {
        modes.push(MemoryMode::Segments);
    }
    if runs == 0 {
        modes.clear();
    }
    let rows = modes
        .into_iter()
        .map(|mode| mode_row(gpu, mode, size, batch, batches, runs))
        .collect::<Result<_, _>>()?;
    Ok(AllocLatency {
        size_bytes: size,
        pool_ns,
        create_buffer_ns,
        speedup: create_buffer_ns / pool_ns,
        create_buffer_without_destroy_ns: median(&bare_samples),
        batch,
        batches: batches.max(1),
        rows,
    })
}

/// A timer of `batch` allocs and frees of a cached block of `size` bytes from `pool`, in ns
/// per alloc + free.
fn cached_timer(
    pool: &Pool,
    size: u64,
    batch: u32,
) -> Result<impl FnMut() -> Result<f64, AllocBenchError> + '_, AllocBenchError> {
    let alloc = move || {
        pool.alloc(size).map_err(|source| AllocBenchError::Alloc {
            size,
            source: Box::new(source),
        })
    };
    drop(alloc()?);
    Ok(move || {
        let start = Instant::now();
        for _ in 0..batch {
            drop(std::hint::black_box(alloc()?));
        }
        Ok(start.elapsed().as_nanos() as f64 / batch as f64)
    })
}

/// The row of one memory mode.
fn mode_row(
    gpu: &GpuContext,
    mode: MemoryMode,
    size: u64,
    batch: u32,
    batches: u32,
    runs: u32,
) -> Result<AllocRow, AllocBenchError> {
    let conf = match mode {
        MemoryMode::Pages => "expandable_segments:True",
        MemoryMode::Segments => "expandable_segments:False",
    };
    let config = Config::parse(conf).expect("a valid configuration");
    let pool = Pool::from_context(gpu, config.clone())?;
    let mut timer = cached_timer(&pool, size, batch)?;
    timer()?;
    let samples = (0..batches.max(1))
        .map(|_| timer())
        .collect::<Result<Vec<_>, _>>()?;
    drop(timer);
    drop(pool);
    let trace = read_trace_from(TRACE.as_bytes(), &ReadOptions::default())
        .expect("the embedded trace parses");
    let scale = trace_scale(gpu);
    let options = GpuReplayOptions::default()
        .with_scale(scale)
        .with_repeat(runs.max(2));
    let (pool_ns_per_op, engine_ns_per_op, repeat) =
        steady_figures(&trace, &config, gpu, &options)?;
    let (hot_pool_ns_per_op, hot_engine_ns_per_op, _) =
        steady_figures(&trace, &config, gpu, &options.with_keep_cache(true))?;
    Ok(AllocRow {
        mode,
        conf: conf.to_string(),
        cached_ns: median(&samples),
        trace: TRACE_NAME,
        ops: trace.ops.len() as u64,
        scale,
        runs: repeat,
        pool_ns_per_op,
        engine_ns_per_op,
        pool_over_engine: pool_ns_per_op / engine_ns_per_op,
        hot_pool_ns_per_op,
        hot_engine_ns_per_op,
        hot_pool_over_engine: hot_pool_ns_per_op / hot_engine_ns_per_op,
    })
}

/// One `replay --gpu` of `trace`: the pool's time per operation outside driver calls (the
/// median of the runs after the first), the engine alone's, and the runs made.
fn steady_figures(
    trace: &Trace,
    config: &Config,
    gpu: &GpuContext,
    options: &GpuReplayOptions,
) -> Result<(f64, f64, u32), AllocBenchError> {
    let report = replay_on_gpu(trace, config, gpu, options)?;
    let pool = report
        .rest_median
        .map_or(report.pool_ns_per_op, |rest| rest.pool_ns_per_op);
    Ok((
        pool,
        report.engine_ns_per_op.unwrap_or(f64::NAN),
        report.repeat,
    ))
}

/// The divisor that fits the trace (8.7 GB live at its peak) on the device: 1 on a device
/// with 32 GiB or more, else 8 (lavapipe's pages-mode address space is 2 GiB).
fn trace_scale(gpu: &GpuContext) -> u64 {
    let device = gpu
        .memory_info()
        .and_then(|info| info.device_local_bytes())
        .unwrap_or(0);
    if device >= 32 << 30 { 1 } else { 8 }
}
