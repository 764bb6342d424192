//! Replaying a trace through a real pool on a GPU: device memory and driver time, beside the
//! engine's figures.

use std::time::Instant;

use serde::Serialize;

use super::error::Position;
use super::ops::{Trace, TraceOp};
use super::replay::{ReplayOptions, replay};
use super::replay_error::ReplayError;
use crate::config::Config;
use crate::engine::{AllocError, SourceError};
use crate::gpu::sparse::ChunkPolicy;
use crate::gpu::{DeviceMemoryInfo, GpuContext};
use crate::pool::{Block, MemoryMode, Pool, PoolError, PoolOptions};

/// Settings of [`replay_on_gpu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GpuReplayOptions {
    /// Every size is divided by this (rounded up; at least 1 B), so that a trace recorded on
    /// a large GPU fits a small device (lavapipe has 2 GiB of sparse address space).
    pub scale: u64,
    /// Device memory for `per_process_memory_fraction`; `None` reads it from the adapter.
    pub device_memory: Option<u64>,
    /// How a pool in pages mode sizes its device memory chunks.
    pub chunk_policy: ChunkPolicy,
    /// Replays of the trace in one process, through one pool whose cache is released
    /// (`empty_cache`) between them, as PyTorch's would be (at least 1).
    pub repeat: u32,
    /// Replay the same (scaled) trace through the engine alone as well, on a model of the
    /// same device, for `engine_ns_per_op`.
    pub engine_baseline: bool,
    /// Keep the pool's cache between runs instead of releasing it: the runs after the
    /// first then reuse cached memory, which is the pool's hot path (allocations and frees
    /// that need no driver call) where the trace repeats itself.
    pub keep_cache: bool,
    /// Bias the pool to the replaying thread ([`PoolOptions::with_owner_bias`], default
    /// `true`); `false` measures the pool with its locks taken on every operation.
    pub owner_bias: bool,
    /// Read the device heap's usage (`VK_EXT_memory_budget`) after every change of the
    /// pool's device memory in the first run, for
    /// [`heap_usage_peak_bytes`](GpuReplayReport::heap_usage_peak_bytes) (default `false`).
    /// The reads are driver calls inside the first run's time (its `heap_query_s`): on
    /// NVIDIA a read can wait for binds in flight, 0.1-0.5 ms in pages mode, where
    /// PyTorch's timed loop makes none. Off, no run reads the heap.
    pub heap_watch: bool,
}

impl Default for GpuReplayOptions {
    fn default() -> Self {
        GpuReplayOptions {
            scale: 1,
            device_memory: None,
            chunk_policy: ChunkPolicy::default(),
            repeat: 1,
            engine_baseline: true,
            keep_cache: false,
            owner_bias: true,
            heap_watch: false,
        }
    }
}

impl GpuReplayOptions {
    /// Divides every size by `scale` (at least 1).
    pub fn with_scale(mut self, scale: u64) -> Self {
        self.scale = scale.max(1);
        self
    }

    /// Sets the device memory size for `per_process_memory_fraction`.
    pub fn with_device_memory(mut self, bytes: Option<u64>) -> Self {
        self.device_memory = bytes;
        self
    }

    /// Sets the chunk policy of a pool in pages mode.
    pub fn with_chunk_policy(mut self, policy: ChunkPolicy) -> Self {
        self.chunk_policy = policy;
        self
    }

    /// Replays the trace `runs` times in one process (at least 1), releasing the pool's
    /// cache between runs.
    pub fn with_repeat(mut self, runs: u32) -> Self {
        self.repeat = runs.max(1);
        self
    }

    /// Replays the trace through the engine alone too (the default), or not.
    pub fn with_engine_baseline(mut self, baseline: bool) -> Self {
        self.engine_baseline = baseline;
        self
    }

    /// Keeps the pool's cache between runs (see [`keep_cache`](Self::keep_cache)).
    pub fn with_keep_cache(mut self, keep: bool) -> Self {
        self.keep_cache = keep;
        self
    }

    /// Asks for the pool's owner bias, or not (see [`owner_bias`](Self::owner_bias)).
    pub fn with_owner_bias(mut self, owner_bias: bool) -> Self {
        self.owner_bias = owner_bias;
        self
    }

    /// Reads the heap's usage in the first run, or not (see [`heap_watch`](Self::heap_watch)).
    pub fn with_heap_watch(mut self, watch: bool) -> Self {
        self.heap_watch = watch;
        self
    }
}

/// What one replay of the trace through the pool took (a run of
/// [`GpuReplayOptions::repeat`]). Times are seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
#[non_exhaustive]
pub struct GpuReplayRun {
    /// The trace's operations alone, from the first to the last (pool creation, and freeing
    /// what the trace leaves live, not included).
    pub replay_time_s: f64,
    /// Of `replay_time_s`: in the driver getting and giving back device memory (see
    /// [`GpuReplayReport::driver_time_s`]).
    pub driver_time_s: f64,
    /// Of `replay_time_s`: CPU waits for the GPU before unmapping and for pending binds.
    pub unmap_wait_s: f64,
    /// Of `replay_time_s`: ordering GPU work before bytes reached through other wrappers
    /// are reused (pages mode).
    pub ordering_time_s: f64,
    /// Of `replay_time_s`: the replay's own reads of the device heap's usage
    /// (`heap_usage_peak_bytes`; first run only, with [`GpuReplayOptions::heap_watch`]),
    /// which the driver may answer only after binds in flight are applied: the harness's
    /// time, not the pool's. 0 without the watch.
    pub heap_query_s: f64,
    /// The pool's own time per operation: `replay_time_s` less driver time, waits and the
    /// heap queries, in nanoseconds; what an allocation or free costs the caller beyond the
    /// driver.
    pub pool_ns_per_op: f64,
    /// After `replay_time_s` (not part of it): the wait until every bind the run submitted
    /// was applied on the GPU (pages mode; next to nothing for segments, which have no
    /// binds). `replay_time_s` plus this is the
    /// time until all the memory the trace mapped is usable, as fixed segments' is when
    /// their allocation returns.
    pub bind_wait_s: f64,
    /// Device memory allocations (segment buffers, or chunks).
    pub device_allocations: u64,
    /// `vkQueueBindSparse` calls (0 for segments).
    pub bind_calls: u64,
    /// Orderings of all later GPU work after all submitted work (pages mode).
    pub wrapper_orderings: u64,
    /// The pool's device memory peak so far: over this run and the ones before it. The
    /// report's [`device_memory_peak_bytes`](GpuReplayReport::device_memory_peak_bytes) is
    /// the first run's; with `--keep-cache`, the last run's figure is the loop's. In
    /// `rest_median`, the largest of the rest runs'.
    pub device_memory_peak_bytes: u64,
    /// The engine's peak of reserved bytes so far, as
    /// [`peak_reserved_bytes`](GpuReplayReport::peak_reserved_bytes) counts it for the first
    /// run. In `rest_median`, the largest of the rest runs'.
    pub peak_reserved_bytes: u64,
}

/// What a replay on a GPU measured. Serialized as `wgpool replay --gpu --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct GpuReplayReport {
    /// The adapter the pool ran on.
    pub adapter: String,
    /// The configuration, in `WGPOOL_CONF` syntax (empty for the defaults).
    pub conf: String,
    /// `pages` or `segments`: the memory mode of the pool.
    pub mode: MemoryMode,
    /// Why the pool ran in that mode.
    pub mode_reason: String,
    /// The divisor applied to every size.
    pub scale: u64,
    /// Operations replayed.
    pub ops: u64,
    /// Peak of the summed (scaled) requested sizes of live allocations.
    pub peak_live_bytes: u64,
    /// The engine's peak of reserved bytes (in pages mode: pages mapped plus spare pages).
    pub peak_reserved_bytes: u64,
    /// `peak_reserved_bytes / peak_live_bytes`.
    pub ratio: f64,
    /// Peak of allocated (rounded) bytes.
    pub peak_allocated_bytes: u64,
    /// The peak of device memory the pool took, as the memory layer counts it: segment
    /// buffers, or `VkDeviceMemory` chunks behind the pages.
    pub device_memory_peak_bytes: u64,
    /// `device_memory_peak_bytes / peak_reserved_bytes`.
    pub device_over_reserved: f64,
    /// With [`GpuReplayOptions::heap_watch`] and `VK_EXT_memory_budget`: the peak over the
    /// first run of the heap's usage less its usage before the pool existed. It counts
    /// every allocation on the heap (wgpu's own included), so it checks
    /// `device_memory_peak_bytes` from outside; `null` without the watch or the extension.
    pub heap_usage_peak_bytes: Option<u64>,
    /// Time in the driver getting and giving back device memory: `create_buffer` and
    /// `destroy` for segments; memory allocation and freeing, binds, and creating and
    /// releasing ranges and their wrappers for pages.
    pub driver_time_s: f64,
    /// Of `driver_time_s`: getting and giving back memory (`create_buffer` and `destroy`, or
    /// `vkAllocateMemory` and `vkFreeMemory`).
    pub allocation_time_s: f64,
    /// `vkAllocateMemory` on the page reserve's own thread (`page_reserve_chunks`), off the
    /// pool's path: not in `driver_time_s` (0 for segments).
    pub background_allocation_time_s: f64,
    /// Of `device_allocations`: those the page reserve's thread made.
    pub background_allocations: u64,
    /// Chunks that maps took from the page reserve.
    pub reserve_taken: u64,
    /// Of `reserve_taken`: chunks a map had to wait for (their allocation was under way).
    pub reserve_waits: u64,
    /// Of `driver_time_s`: `vkQueueBindSparse` calls (and their fence waits where binds are
    /// not ordered on the GPU).
    pub bind_time_s: f64,
    /// CPU waits for the GPU before pages were unmapped, and for pending binds before chunks
    /// were freed or ranges released (not driver time).
    pub unmap_wait_s: f64,
    /// Device memory allocations (segment buffers, or chunks).
    pub device_allocations: u64,
    /// Device memory given back (segment buffers destroyed, or chunks freed).
    pub device_frees: u64,
    /// `vkQueueBindSparse` calls (0 for segments).
    pub bind_calls: u64,
    /// Maps that waited for a call shared with other binds (`page_bind_batch`; 0 for
    /// segments).
    pub maps_queued: u64,
    /// Unmaps (and unbinds of spare pages) that waited the same way (0 for segments).
    pub unmaps_queued: u64,
    /// Empty wgpu submissions that signal the GPU timeline for an unmap to wait for (at most
    /// one per unmap; none where no work was submitted since the last one; 0 for segments).
    pub unbind_signals: u64,
    /// Of `driver_time_s`: creating and releasing ranges and their wrappers (0 for
    /// segments).
    pub range_time_s: f64,
    /// Extra wgpu wrappers made over ranges (0 for segments).
    pub wrappers_created: u64,
    /// Segments (or ranges) created and released, as the engine counts them.
    pub segments_created: u64,
    /// See `segments_created`.
    pub segments_released: u64,
    /// Allocations that needed the release-everything retry.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Wall time of the first replay, pool creation included, up to the point where every
    /// bind it submitted was applied (the first run's `bind_wait_s` included).
    pub wall_time_s: f64,
    /// The first run's pool time per operation: the pool's time per operation
    /// outside driver calls and GPU waits.
    pub pool_ns_per_op: f64,
    /// The same (scaled) trace replayed through the engine alone in the same process, with
    /// the same configuration, on a model of the same device (its page mapping and largest
    /// buffer): nanoseconds per operation, the median of its timed runs. `null` when not
    /// measured.
    pub engine_ns_per_op: Option<f64>,
    /// `pool_ns_per_op / engine_ns_per_op` (the median of the runs after the first where
    /// there are several): what the pool adds around its engine.
    pub pool_over_engine: Option<f64>,
    /// The peak of reserved bytes of the same engine-alone replay (one run of the trace on
    /// the model of this device), beside the first run's
    /// [`peak_reserved_bytes`](Self::peak_reserved_bytes): where they differ, the pool
    /// placed blocks otherwise than its engine alone would. The pool's reuse cache hands a
    /// just-dropped block to the next request of the same size without asking the engine,
    /// so traces that repeat sizes can differ; with the cache off
    /// ([`Config::reuses_blocks`](crate::config::Config::reuses_blocks)) or where every size
    /// differs the two are equal. `null` when not measured.
    pub engine_peak_reserved_bytes: Option<u64>,
    /// Orderings of all later GPU work after all submitted work in the first run, and
    /// their CPU time (pages mode; see [`crate::pool::DeviceMemoryUsage::wrapper_orderings`]).
    pub wrapper_orderings: u64,
    /// See `wrapper_orderings`.
    pub ordering_time_s: f64,
    /// How many times the trace was replayed ([`GpuReplayOptions::repeat`]).
    pub repeat: u32,
    /// Whether the cache was kept between runs ([`GpuReplayOptions::keep_cache`]).
    pub keep_cache: bool,
    /// Whether the pool's owner bias still held after the last run
    /// ([`Pool::owner_bias_holds`]): `false` when it was not asked for, when the system
    /// cannot revoke one (no `membarrier`), or when another thread used the pool.
    pub owner_bias: bool,
    /// Every run, the first (a cold start: the driver's first allocations) included.
    pub runs: Vec<GpuReplayRun>,
    /// With several runs, the median of each figure over the runs after the first: the
    /// pool's steady cost with a released cache.
    pub rest_median: Option<GpuReplayRun>,
}

/// Why [`replay_on_gpu`] stopped. Each variant keeps the pool's own error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuReplayError {
    /// The pool could not be created: the configuration cannot be applied to this device
    /// (say `expandable_segments:True` on a device that cannot map pages), or setting up
    /// its memory failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The engine-alone replay for `engine_ns_per_op` failed (it runs the same
    /// configuration the pool accepted, so this is not expected).
    #[error("replaying the trace through the engine alone failed: {source}")]
    EngineBaseline {
        /// The replay's error.
        #[source]
        source: ReplayError,
    },
    /// An allocation of the trace failed with an error other than out-of-memory (which is
    /// counted, not an error): a request above the largest block the pool serves
    /// ([`AllocError::TooLarge`], which names the size and the device's limit), or a
    /// failure of the device.
    #[error("{position}: {source}")]
    Alloc {
        /// The operation of the trace that failed.
        position: Position,
        /// The pool's error.
        #[source]
        source: Box<AllocError>,
    },
    /// Submitting the binds still queued at the end of a run (`page_bind_batch`), or waiting
    /// for them, failed: the driver's error.
    #[error("binding the pages mapped at the end of the trace failed: {source}")]
    QueuedBinds {
        /// The page mapping's error.
        #[source]
        source: SourceError,
    },
    /// The device was lost during the replay: its figures would describe work that did not
    /// run, so none are reported.
    #[error(transparent)]
    DeviceLost(#[from] crate::gpu::DeviceLost),
}

/// Replays `trace` under `config` through a [`Pool`] on `gpu`'s device: every allocation
/// is a real block, every free drops it. The pool is in pages mode where the device and the
/// configuration allow it (see [`Pool::memory_mode`]).
///
/// Streams are not told apart (the pool serves one stream). An allocation the pool refuses
/// with out-of-memory is counted in `num_ooms`, and its later free skipped, as in
/// [`replay`](super::replay).
///
/// # Errors
///
/// [`GpuReplayError::Pool`] when the pool could not be created (for example
/// `expandable_segments:True` on a device that cannot map pages), and
/// [`GpuReplayError::Alloc`] when an allocation failed with an error other than
/// out-of-memory (a request above [`Pool::max_block_size`], a lost device), and
/// [`GpuReplayError::DeviceLost`] when the device was lost during a run.
pub fn replay_on_gpu(
    trace: &Trace,
    config: &Config,
    gpu: &GpuContext,
    options: &GpuReplayOptions,
) -> Result<GpuReplayReport, GpuReplayError> {
    let start = Instant::now();
    let heap_before = if options.heap_watch {
        heap_usage(gpu)
    } else {
        None
    };
    let device_memory = options
        .device_memory
        .or_else(|| gpu.memory_info().and_then(|info| info.device_local_bytes()));
    let mut pool_options = PoolOptions::default()
        .with_error_log(gpu.errors().clone())
        .with_label("replay")
        .with_chunk_policy(options.chunk_policy)
        .with_owner_bias(options.owner_bias);
    if let Some(bytes) = device_memory {
        pool_options = pool_options.with_device_memory(bytes);
    }
    let pool = Pool::with_options(gpu.device(), gpu.queue(), config.clone(), pool_options)?;
    let scale = options.scale.max(1);
    // Scaled once, here, for the pool's runs and the engine's alone: no division on the
    // timed path of either.
    let scaled = trace.scaled(scale);
    let mut runs = Vec::new();
    let mut first = None;
    for run in 0..options.repeat.max(1) {
        // Watched only where the heap could be read before the pool existed.
        let mut heap = heap_before.filter(|_| run == 0).map(|before| HeapWatch {
            before,
            peak: 0,
            changes: pool.device_memory_changes(),
        });
        let outcome = replay_once(&scaled, &pool, gpu, heap.as_mut())?;
        gpu.errors().check_device()?;
        if run == 0 {
            let stats = pool.memory_stats();
            let usage = pool.device_memory_usage();
            first = Some((outcome.peak_live, stats, usage, start.elapsed(), heap));
        }
        runs.push(outcome.run);
        // Between runs the cache goes back to the device, as `torch.cuda.empty_cache()`,
        // unless the runs measure the hot path.
        if !options.keep_cache {
            pool.empty_cache();
        }
    }
    let (peak_live, stats, usage, wall, heap) = first.expect("at least one run");
    let engine = if options.engine_baseline {
        Some(engine_baseline(&scaled, config, &pool, device_memory, gpu)?)
    } else {
        None
    };
    let engine_ns_per_op = engine.map(|(ns, _)| ns);
    let rest_median = median_run(&runs[1..]);
    let steady = rest_median.as_ref().unwrap_or(&runs[0]).pool_ns_per_op;
    let peak_reserved = stats.reserved_bytes.all.peak;
    let ratio = |x: u64, of: u64| if of == 0 { 0.0 } else { x as f64 / of as f64 };
    let report = GpuReplayReport {
        adapter: gpu.info().name.clone(),
        conf: config.to_conf_string(),
        mode: pool.memory_mode(),
        mode_reason: pool.memory_mode_reason(),
        scale,
        ops: trace.ops.len() as u64,
        peak_live_bytes: peak_live,
        peak_reserved_bytes: peak_reserved,
        ratio: ratio(peak_reserved, peak_live),
        peak_allocated_bytes: stats.allocated_bytes.all.peak,
        device_memory_peak_bytes: usage.device_bytes_peak,
        device_over_reserved: ratio(usage.device_bytes_peak, peak_reserved),
        heap_usage_peak_bytes: heap.map(|watch| watch.peak),
        driver_time_s: usage.driver_time.as_secs_f64(),
        allocation_time_s: usage.allocation_time.as_secs_f64(),
        background_allocation_time_s: usage.background_allocation_time.as_secs_f64(),
        background_allocations: usage.background_allocations,
        reserve_taken: usage.reserve_taken,
        reserve_waits: usage.reserve_waits,
        bind_time_s: usage.bind_time.as_secs_f64(),
        unmap_wait_s: usage.unmap_wait_time.as_secs_f64(),
        device_allocations: usage.allocations,
        device_frees: usage.frees,
        bind_calls: usage.bind_calls,
        maps_queued: usage.maps_queued,
        unmaps_queued: usage.unmaps_queued,
        unbind_signals: usage.unbind_signals,
        range_time_s: usage.range_time.as_secs_f64(),
        wrappers_created: usage.wrappers_created,
        segments_created: stats.num_device_alloc,
        segments_released: stats.num_device_free,
        num_alloc_retries: stats.num_alloc_retries,
        num_ooms: stats.num_ooms,
        wall_time_s: wall.as_secs_f64(),
        pool_ns_per_op: runs[0].pool_ns_per_op,
        engine_ns_per_op,
        pool_over_engine: engine_ns_per_op.map(|engine| steady / engine),
        engine_peak_reserved_bytes: engine.map(|(_, reserved)| reserved),
        wrapper_orderings: usage.wrapper_orderings,
        ordering_time_s: usage.ordering_time.as_secs_f64(),
        repeat: options.repeat.max(1),
        keep_cache: options.keep_cache,
        owner_bias: pool.owner_bias_holds(),
        runs,
        rest_median,
    };
    drop(pool);
    Ok(report)
}

/// The device heap's usage while the pool runs, read when the pool's device memory changed.
struct HeapWatch {
    /// The heap's usage before the pool existed.
    before: u64,
    /// The peak of the usage less `before`.
    peak: u64,
    /// The pool's device-memory change counter when last read.
    changes: u64,
}

/// One run's figures, and the peak of live bytes.
struct RunOutcome {
    run: GpuReplayRun,
    peak_live: u64,
}

/// Replays the trace (already scaled) once through `pool`, then frees what it left live.
fn replay_once(
    trace: &Trace,
    pool: &Pool,
    gpu: &GpuContext,
    mut heap: Option<&mut HeapWatch>,
) -> Result<RunOutcome, GpuReplayError> {
    let mut slots: Vec<Option<(Block, u64)>> = (0..trace.slots).map(|_| None).collect();
    let (mut live, mut peak_live) = (0u64, 0u64);
    let alloc = |size: u64, op: usize| -> Result<Option<Block>, GpuReplayError> {
        match pool.alloc(size.max(1)) {
            Ok(block) => Ok(Some(block)),
            Err(AllocError::OutOfMemory(_)) => Ok(None),
            Err(source) => Err(GpuReplayError::Alloc {
                position: trace.position(op),
                source: Box::new(source),
            }),
        }
    };
    let before = pool.device_memory_usage();
    let mut heap_query = std::time::Duration::ZERO;
    let start = Instant::now();
    for (i, op) in trace.ops.iter().enumerate() {
        match *op {
            TraceOp::Alloc { slot, size, .. } if size > 0 => {
                if let Some(block) = alloc(size, i)? {
                    live += size;
                    peak_live = peak_live.max(live);
                    slots[slot as usize] = Some((block, size));
                }
            }
            TraceOp::Alloc { .. } => {}
            TraceOp::Free { slot } => {
                if let Some((block, size)) = slots[slot as usize].take() {
                    live -= size;
                    drop(block);
                }
            }
            TraceOp::Refused { size, .. } => {
                drop(alloc(size, i)?);
            }
        }
        // The heap is read only when the pool's device memory may have changed: the query
        // is a driver call, and the check a load.
        if let Some(watch) = heap.as_deref_mut() {
            let changes = pool.device_memory_changes();
            if changes != watch.changes {
                let queried = Instant::now();
                watch.changes = changes;
                if let Some(usage) = heap_usage(gpu) {
                    watch.peak = watch.peak.max(usage.saturating_sub(watch.before));
                }
                heap_query += queried.elapsed();
            }
        }
    }
    // Binds still queued (`page_bind_batch`) reach the driver within the run: every block the
    // trace made is bound by its end, and every page it freed unbound, as without batching.
    pool.submit_queued_binds()
        .map_err(|source| GpuReplayError::QueuedBinds { source })?;
    let elapsed = start.elapsed();
    let bind_wait = Instant::now();
    pool.wait_for_binds()
        .map_err(|source| GpuReplayError::QueuedBinds { source })?;
    let bind_wait = bind_wait.elapsed();
    let after = pool.device_memory_usage();
    drop(slots);
    let seconds = |d: std::time::Duration| d.as_secs_f64();
    let driver = after.driver_time.saturating_sub(before.driver_time);
    let waits = after.unmap_wait_time.saturating_sub(before.unmap_wait_time);
    let ops = trace.ops.len().max(1) as f64;
    let run = GpuReplayRun {
        replay_time_s: seconds(elapsed),
        driver_time_s: seconds(driver),
        unmap_wait_s: seconds(waits),
        ordering_time_s: seconds(after.ordering_time.saturating_sub(before.ordering_time)),
        heap_query_s: seconds(heap_query),
        pool_ns_per_op: seconds(elapsed.saturating_sub(driver + waits + heap_query)) * 1e9 / ops,
        bind_wait_s: seconds(bind_wait),
        device_allocations: after.allocations - before.allocations,
        bind_calls: after.bind_calls - before.bind_calls,
        wrapper_orderings: after.wrapper_orderings - before.wrapper_orderings,
        device_memory_peak_bytes: after.device_bytes_peak,
        peak_reserved_bytes: pool.memory_stats().reserved_bytes.all.peak,
    };
    Ok(RunOutcome { run, peak_live })
}

/// The engine alone on the same operations (`trace`, scaled as the pool's runs), the same
/// configuration, and a modelled device with the pool's page mapping and largest buffer.
/// Nanoseconds per operation, the median of the timed runs, and the peak of reserved bytes.
fn engine_baseline(
    trace: &Trace,
    config: &Config,
    pool: &Pool,
    device_memory: Option<u64>,
    gpu: &GpuContext,
) -> Result<(f64, u64), GpuReplayError> {
    let options = ReplayOptions::default()
        .with_device_memory(device_memory)
        .with_page_mapping(pool.page_mapping())
        .with_max_segment_size(Some(gpu.limits().max_buffer_size));
    let report = replay(trace, config, &options)
        .map_err(|source| GpuReplayError::EngineBaseline { source })?;
    Ok((report.ns_per_op_median, report.peak_reserved_bytes))
}

/// The median of each figure over `runs`; `None` for none.
fn median_run(runs: &[GpuReplayRun]) -> Option<GpuReplayRun> {
    if runs.is_empty() {
        return None;
    }
    fn median<T: Copy + PartialOrd>(mut values: Vec<T>) -> T {
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        values[values.len() / 2]
    }
    let f = |get: fn(&GpuReplayRun) -> f64| median(runs.iter().map(get).collect());
    let n = |get: fn(&GpuReplayRun) -> u64| median(runs.iter().map(get).collect());
    Some(GpuReplayRun {
        replay_time_s: f(|r| r.replay_time_s),
        driver_time_s: f(|r| r.driver_time_s),
        heap_query_s: f(|r| r.heap_query_s),
        unmap_wait_s: f(|r| r.unmap_wait_s),
        ordering_time_s: f(|r| r.ordering_time_s),
        pool_ns_per_op: f(|r| r.pool_ns_per_op),
        bind_wait_s: f(|r| r.bind_wait_s),
        device_allocations: n(|r| r.device_allocations),
        bind_calls: n(|r| r.bind_calls),
        wrapper_orderings: n(|r| r.wrapper_orderings),
        // Peaks so far: the largest is the latest, what the runs reached.
        device_memory_peak_bytes: runs.iter().map(|r| r.device_memory_peak_bytes).max()?,
        peak_reserved_bytes: runs.iter().map(|r| r.peak_reserved_bytes).max()?,
    })
}

/// Usage of the device-local heaps, where the driver reports it.
fn heap_usage(gpu: &GpuContext) -> Option<u64> {
    let info: DeviceMemoryInfo = gpu.memory_info()?;
    if !info.budget_supported {
        return None;
    }
    info.heaps
        .iter()
        .filter(|h| h.device_local)
        .map(|h| h.usage)
        .sum()
}
