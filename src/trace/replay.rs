//! Replaying a trace through the engine over virtual segments, with no GPU.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use super::oracle::{OracleCheck, OracleReport, OracleSegments, Outcome, explain};
use super::replay_error::ReplayError;
use super::{Trace, TraceOp};
use crate::config::{Config, Policy};
use crate::engine::CudaAddressModel;
use crate::engine::{AllocError, BlockId, Engine, EngineLimits, PageMapping, VirtualSegments};
use crate::history::{EventObserver, Observed};

/// What a replay measured. Serialized as `wgpool replay --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// The input's format: `wgpool-csv`, `rmm-csv` or `pytorch-snapshot`.
    pub format: &'static str,
    /// The configuration, in `WGPOOL_CONF` syntax (empty for the defaults).
    pub conf: String,
    /// The policy that ran.
    pub policy: &'static str,
    /// `pages` (memory mapped in pages into address ranges; the replay models a device that
    /// can map pages, like an H200 with Vulkan sparse binding) or `segments` (fixed
    /// segments: `expandable_segments:False`).
    pub mode: &'static str,
    /// Operations replayed: every pass's ([`ReplayOptions::passes`]), the frees that end
    /// a pass not counted.
    pub ops: u64,
    /// How many times the trace ran in a row on one engine ([`ReplayOptions::passes`]).
    pub passes: u32,
    /// Peak of the summed requested sizes of live allocations.
    pub peak_live_bytes: u64,
    /// Peak of physical memory: in segments mode, of reserved (segment) bytes; in pages
    /// mode, of pages mapped plus spare pages (unmapped and kept for reuse).
    pub peak_reserved_bytes: u64,
    /// `peak_reserved_bytes / peak_live_bytes`.
    pub ratio: f64,
    /// Peak of allocated (rounded) bytes.
    pub peak_allocated_bytes: u64,
    /// Segments created over the replay.
    pub segments_created: u64,
    /// Segments released over the replay.
    pub segments_released: u64,
    /// Bytes of every segment created over the replay (churn).
    pub segment_bytes_created: u64,
    /// `segment_bytes_created / peak_live_bytes`.
    pub churn: f64,
    /// Reserved bytes at the end of the trace.
    pub final_reserved_bytes: u64,
    /// Bytes mapped over the replay (pages mode); in segments mode, the bytes of every
    /// segment created.
    pub mapped_bytes_total: u64,
    /// Bytes unmapped over the replay (pages mode); in segments mode, the bytes of every
    /// segment released.
    pub unmapped_bytes_total: u64,
    /// Batched binds: map and unmap calls, one per batch as the GPU layer issues them (0 in
    /// segments mode).
    pub bind_calls: u64,
    /// Allocations that needed the release-everything retry.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory (possible only under a cap).
    pub num_ooms: u64,
    /// Engine time per operation in nanoseconds, parsing excluded: the fastest of the timed
    /// runs, the least disturbed by other work on the machine (the engine is deterministic,
    /// so slower runs differ only by interference).
    pub ns_per_op: f64,
    /// The median of the timed runs, for comparison.
    pub ns_per_op_median: f64,
    /// How many times the trace was replayed to time it.
    pub timed_runs: u32,
    /// With [`ReplayOptions::oracle`]: every allocation checked against the trace's
    /// addresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleReport>,
    /// With [`ReplayOptions::stats`]: the statistics after the last operation, as
    /// `torch.cuda.memory_stats()` returns them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_stats: Option<BTreeMap<String, i64>>,
}

/// Replay settings beyond the configuration.
///
/// ```
/// use wgpool::trace::ReplayOptions;
/// let options = ReplayOptions::default()
///     .with_check_every_op(true)
///     .with_min_timed_runs(1);
/// assert!(options.check_every_op);
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// Device memory size for `per_process_memory_fraction`, if given.
    pub device_memory: Option<u64>,
    /// Check the engine's invariants after every operation (slow; for tests).
    pub check_every_op: bool,
    /// Minimum number of timed runs.
    pub min_timed_runs: u32,
    /// Treat the trace's ids as the addresses the recording allocator handed out: place
    /// each new segment at its first allocation's address and check every allocation's
    /// address (and every `oom` row) against the trace. Replays once, untimed.
    pub oracle: bool,
    /// Report the statistics as `torch.cuda.memory_stats()` does.
    pub stats: bool,
    /// Under `policy:pytorch` without [`oracle`](ReplayOptions::oracle): give each new
    /// segment the address the CUDA driver would have given it
    /// ([`CudaAddressModel`](crate::engine::CudaAddressModel)), so that ties between equal free
    /// blocks break as in PyTorch. On by default; off, segments take consecutive addresses
    /// in the order they are created.
    pub cuda_addresses: bool,
    /// How the modelled device maps pages (`None`: it cannot). By default an H200's
    /// ([`VirtualSegments::H200_PAGES`]).
    pub page_mapping: Option<PageMapping>,
    /// The largest segment the modelled device creates (a wgpu device's `max_buffer_size`);
    /// `None`: the engine's own bound.
    pub max_segment_size: Option<u64>,
    /// How many times the trace runs in a row on one engine, its cache kept, as a training
    /// loop runs the same steps again and again (1 by default, and 0 counts as 1). With more
    /// than one, what a pass leaves allocated is freed at its end, as `replay --gpu --repeat
    /// N --keep-cache` frees what a run leaves, so every pass starts from the same live
    /// memory. The report's figures cover the whole loop.
    pub passes: u32,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            device_memory: None,
            check_every_op: false,
            min_timed_runs: 5,
            oracle: false,
            stats: false,
            cuda_addresses: true,
            page_mapping: Some(VirtualSegments::H200_PAGES),
            max_segment_size: None,
            passes: 1,
        }
    }
}

impl ReplayOptions {
    /// These options with the device memory size for `per_process_memory_fraction`.
    pub fn with_device_memory(mut self, device_memory: Option<u64>) -> Self {
        self.device_memory = device_memory;
        self
    }

    /// These options, checking the engine's invariants after every operation or not.
    pub fn with_check_every_op(mut self, check: bool) -> Self {
        self.check_every_op = check;
        self
    }

    /// These options with at least `runs` timed runs.
    pub fn with_min_timed_runs(mut self, runs: u32) -> Self {
        self.min_timed_runs = runs;
        self
    }

    /// These options, checking the trace against its addresses (`--oracle`) or not.
    pub fn with_oracle(mut self, oracle: bool) -> Self {
        self.oracle = oracle;
        self
    }

    /// These options, reporting PyTorch's `memory_stats` dictionary (`--stats`) or not.
    pub fn with_stats(mut self, stats: bool) -> Self {
        self.stats = stats;
        self
    }

    /// These options, placing `policy:pytorch`'s segments at modelled CUDA addresses or not.
    pub fn with_cuda_addresses(mut self, cuda_addresses: bool) -> Self {
        self.cuda_addresses = cuda_addresses;
        self
    }

    /// These options, modelling a device that maps pages as `page_mapping` says (`None`: a
    /// device that cannot), as a real pool's [`Pool::page_mapping`](crate::pool::Pool::page_mapping)
    /// reports it.
    pub fn with_page_mapping(mut self, page_mapping: Option<PageMapping>) -> Self {
        self.page_mapping = page_mapping;
        self
    }

    /// These options, modelling a device whose largest segment is `bytes` (a wgpu device's
    /// `max_buffer_size`).
    pub fn with_max_segment_size(mut self, bytes: Option<u64>) -> Self {
        self.max_segment_size = bytes;
        self
    }

    /// These options, running the trace `passes` times in a row on one engine (see
    /// [`ReplayOptions::passes`]).
    ///
    /// ```
    /// use wgpool::config::Config;
    /// use wgpool::trace::{ReplayOptions, parse_trace, replay};
    /// // A step that keeps one buffer (its weights) and frees its activations.
    /// let step = parse_trace("action,id,size,stream\n\
    ///     alloc,1,4096,0\nalloc,2,1048576,0\nfree,2,1048576,0\n")?;
    /// let options = ReplayOptions::default().with_passes(3).with_min_timed_runs(1);
    /// let report = replay(&step, &Config::default(), &options)?;
    /// assert_eq!((report.passes, report.ops), (3, 9));
    /// // The weights are freed at the end of each pass, so live memory peaks as in one.
    /// assert_eq!(report.peak_live_bytes, 4096 + 1048576);
    /// // No passes counts as one.
    /// let once = replay(&step, &Config::default(), &options.with_passes(0))?;
    /// assert_eq!((once.passes, once.ops), (1, 3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_passes(mut self, passes: u32) -> Self {
        self.passes = passes;
        self
    }
}

struct RunResult {
    engine: Engine,
    peak_live: u64,
    elapsed_ns: u128,
    oracle: Option<OracleCheck>,
}

/// Tells `source` that the trace created a stream when it uses `stream` for the first time.
/// Streams are numbered in the order the trace first uses them (`seen` so far); the first is
/// the default stream, and each later one is created just before its first use, as PyTorch's
/// replay (tools/oracle/replay_torch.py) does.
fn note_stream(stream: u32, seen: &mut u32, source: &mut OracleSegments) {
    if stream >= *seen {
        if stream > 0 {
            source.create_stream();
        }
        *seen = stream + 1;
    }
}

/// Frees the block a slot held (block, size, stream) as operation `i` of the replay, and
/// takes its size off `live`.
#[inline(always)]
fn free_held<O: EventObserver>(
    (block, size, stream): (BlockId, u64, u32),
    i: usize,
    engine: &mut Engine,
    device: &mut Observed<'_, OracleSegments, O>,
    live: &mut u64,
) -> Result<(), ReplayError> {
    *live -= size;
    if O::ACTIVE
        && let Some(a) = engine.allocation(block)
    {
        device.observer.on_free(i, &a, stream);
    }
    engine.free(block, device)?;
    Ok(())
}

/// Replays the first `stop` operations (all of them for `None`).
fn run_once<O: EventObserver>(
    trace: &Trace,
    config: &Config,
    options: &ReplayOptions,
    observer: &mut O,
    stop: Option<usize>,
) -> Result<RunResult, ReplayError> {
    // The replay models a device that can map pages (by default an H200 with sparse
    // binding).
    let virtual_device = VirtualSegments::unlimited().with_pages(options.page_mapping);
    let mut limits = EngineLimits::unlimited()
        .with_device_memory(options.device_memory)
        .with_page_mapping(virtual_device.pages);
    if let Some(bytes) = options.max_segment_size {
        limits = limits.with_max_segment_size(bytes);
    }
    let mut engine = Engine::new(config.clone(), limits)?;
    // Free pieces of split segments add records beyond the live blocks.
    engine.reserve_blocks(2 * trace.slots + 64);
    let mut source = OracleSegments::new(virtual_device);
    if options.cuda_addresses && !options.oracle && config.policy == Policy::Pytorch {
        source = source.with_cuda_addresses(CudaAddressModel::new());
    }
    let mut device = Observed {
        source: &mut source,
        observer,
    };
    let mut check = options.oracle.then(OracleCheck::default);
    let mut streams_seen: u32 = 0;
    let mut slots: Vec<Option<(BlockId, u64, u32)>> = vec![None; trace.slots];
    let mut live: u64 = 0;
    let mut peak_live: u64 = 0;
    let start = Instant::now();
    let passes = options.passes.max(1) as usize;
    let ops = &trace.ops[..stop.unwrap_or(trace.ops.len())];
    for pass in 0..passes {
        // Operation `at` of the trace is operation `i` of the loop.
        for (at, op) in ops.iter().enumerate() {
            let i = pass * ops.len() + at;
            match *op {
                TraceOp::Alloc { slot, size, stream } => {
                    if size == 0 {
                        continue;
                    }
                    note_stream(stream, &mut streams_seen, device.source);
                    if O::ACTIVE {
                        device.observer.before_alloc(i, size, stream);
                    }
                    if check.is_some() {
                        device.source.expect(trace.ids.get(at).copied());
                    }
                    let result = engine.allocate(size, stream, &mut device);
                    if let Some(check) = check.as_mut() {
                        let address = trace.ids.get(at).copied().unwrap_or(0);
                        check.compare(i, Outcome::Address { address }, &result);
                    }
                    match result {
                        Ok(a) => {
                            slots[slot as usize] = Some((a.block, size, stream));
                            live += size;
                            peak_live = peak_live.max(live);
                            if O::ACTIVE {
                                device.observer.on_alloc(i, &a, stream);
                            }
                        }
                        Err(AllocError::OutOfMemory(_)) => {
                            if O::ACTIVE {
                                device.observer.on_oom(i, size, stream);
                            }
                        }
                        Err(e) => {
                            return Err(ReplayError::Alloc {
                                position: trace.position(at),
                                source: Box::new(e),
                            });
                        }
                    }
                }
                TraceOp::Refused { size, stream } => {
                    if size == 0 {
                        continue;
                    }
                    note_stream(stream, &mut streams_seen, device.source);
                    device.source.expect(None);
                    let result = engine.allocate(size, stream, &mut device);
                    if let Some(check) = check.as_mut() {
                        check.compare(i, Outcome::OutOfMemory, &result);
                    }
                    match result {
                        // The recording allocator refused it and the trace never frees it: it
                        // holds nothing afterwards here either.
                        Ok(a) => engine.free(a.block, &mut device)?,
                        Err(AllocError::OutOfMemory(_)) => {
                            if O::ACTIVE {
                                device.observer.on_oom(i, size, stream);
                            }
                        }
                        Err(e) => {
                            return Err(ReplayError::Alloc {
                                position: trace.position(at),
                                source: Box::new(e),
                            });
                        }
                    }
                }
                TraceOp::Free { slot } => {
                    if let Some(held) = slots[slot as usize].take() {
                        free_held(held, i, &mut engine, &mut device, &mut live)?;
                    }
                }
            }
            if O::ACTIVE {
                device.observer.after_op(i, &engine, live);
            }
            if options.check_every_op {
                engine
                    .check_invariants()
                    .map_err(|source| ReplayError::Invariant {
                        position: trace.position(at),
                        source,
                    })?;
            }
        }
        // In a loop, each pass ends with nothing of it allocated, as the pass's last operation.
        if passes > 1 && !ops.is_empty() {
            let last = (pass + 1) * ops.len() - 1;
            for slot in &mut slots {
                if let Some(held) = slot.take() {
                    free_held(held, last, &mut engine, &mut device, &mut live)?;
                }
            }
            if O::ACTIVE {
                device.observer.after_op(last, &engine, live);
            }
        }
    }
    let elapsed_ns = start.elapsed().as_nanos();
    if O::ACTIVE {
        device.observer.finish(&engine);
    }
    Ok(RunResult {
        engine,
        peak_live,
        elapsed_ns,
        oracle: check,
    })
}

/// The oracle's report, explaining the first divergence from a replay stopped just before it.
fn oracle_report(
    trace: &Trace,
    config: &Config,
    options: &ReplayOptions,
    check: &OracleCheck,
) -> Result<OracleReport, ReplayError> {
    let first_divergence = match check.first {
        None => None,
        Some((op, expected, got)) => {
            let before = run_once(trace, config, options, &mut (), Some(op))?;
            match trace.ops[op] {
                TraceOp::Alloc { size, stream, .. } | TraceOp::Refused { size, stream } => {
                    Some(explain(&before.engine, config, size, stream, expected, got))
                }
                TraceOp::Free { .. } => None,
            }
        }
    };
    Ok(OracleReport {
        checked: check.checked,
        divergences: check.divergences,
        first_divergence_line: check.first.map(|(op, _, _)| trace.positions[op]),
        expected: check.first.map(|(_, expected, _)| expected),
        got: check.first.map(|(_, _, got)| got),
        first_divergence,
    })
}

/// Replays `trace` under `config` and reports memory and timing figures.
///
/// The memory figures come from the first run; the trace is then replayed again on fresh
/// engines until at least `min_timed_runs` runs and 200 ms have passed; `ns_per_op` is the
/// fastest run, `ns_per_op_median` the median. Out-of-memory under a cap does not stop the
/// replay: the allocation is counted in `num_ooms` and its later free is skipped.
///
/// # Errors
///
/// [`ReplayError`]: a configuration the engine refuses, a request it cannot serve other than
/// by out-of-memory, or an invariant broken under `check_every_op`; the last two name the
/// operation of the trace.
pub fn replay(
    trace: &Trace,
    config: &Config,
    options: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    replay_observed(trace, config, options, &mut ())
}

/// [`replay`], with `observer` watching the first run (the one the memory figures come
/// from).
pub fn replay_observed<O: EventObserver>(
    trace: &Trace,
    config: &Config,
    options: &ReplayOptions,
    observer: &mut O,
) -> Result<ReplayReport, ReplayError> {
    if options.oracle && options.passes > 1 {
        return Err(ReplayError::OracleWithPasses {
            passes: options.passes,
        });
    }
    let first = run_once(trace, config, options, observer, None)?;
    let timing_options = ReplayOptions {
        check_every_op: false,
        ..*options
    };
    let mut times = vec![if options.check_every_op {
        u128::MAX
    } else {
        first.elapsed_ns
    }];
    let budget = Instant::now();
    // An oracle replay is checked, not timed: its one run is the measurement.
    while !options.oracle
        && (times.len() < options.min_timed_runs.max(1) as usize
            || budget.elapsed().as_millis() < 200)
    {
        times.push(run_once(trace, config, &timing_options, &mut (), None)?.elapsed_ns);
        if times.len() > 1000 {
            break;
        }
    }
    if options.oracle && options.check_every_op {
        times.push(first.elapsed_ns);
    }
    times.retain(|&t| t != u128::MAX);
    times.sort_unstable();
    let fastest = times[0];
    let median = times[times.len() / 2];
    let per_op = |ns: u128| {
        if trace.ops.is_empty() {
            0.0
        } else {
            ns as f64 / (trace.ops.len() as f64 * f64::from(options.passes.max(1)))
        }
    };
    let stats = first.engine.memory_stats();
    let passes = options.passes.max(1);
    let ops = trace.ops.len() as u64 * u64::from(passes);
    let pages = first.engine.page_stats();
    let peak_reserved = pages.map_or(stats.reserved_bytes.all.peak, |p| p.physical_peak);
    let ratio_of = |x: u64| {
        if first.peak_live == 0 {
            0.0
        } else {
            x as f64 / first.peak_live as f64
        }
    };
    Ok(ReplayReport {
        format: trace.format.name(),
        conf: config.to_conf_string(),
        policy: config.policy.name(),
        mode: first.engine.memory_mode().name(),
        ops,
        passes,
        peak_live_bytes: first.peak_live,
        peak_reserved_bytes: peak_reserved,
        ratio: ratio_of(peak_reserved),
        peak_allocated_bytes: stats.allocated_bytes.all.peak,
        segments_created: stats.num_device_alloc,
        segments_released: stats.num_device_free,
        segment_bytes_created: stats.reserved_bytes.all.allocated,
        churn: ratio_of(stats.reserved_bytes.all.allocated),
        final_reserved_bytes: stats.reserved_bytes.all.current,
        mapped_bytes_total: pages.map_or(stats.reserved_bytes.all.allocated, |p| p.mapped_total),
        unmapped_bytes_total: pages.map_or(stats.reserved_bytes.all.freed, |p| p.unmapped_total),
        bind_calls: pages.map_or(0, |p| p.bind_calls),
        num_alloc_retries: stats.num_alloc_retries,
        num_ooms: stats.num_ooms,
        ns_per_op: per_op(fastest),
        ns_per_op_median: per_op(median),
        timed_runs: times.len() as u32,
        oracle: match &first.oracle {
            Some(check) => Some(oracle_report(trace, config, options, check)?),
            None => None,
        },
        memory_stats: options.stats.then(|| first.engine.pytorch_memory_stats()),
    })
}
