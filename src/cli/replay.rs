//! `wgpool replay FILE [--conf STR] [--json] ...`: a trace in any supported format through
//! the placement engine.

use std::path::PathBuf;

use clap::Args;
use wgpool::config::Config;
use wgpool::format::bytes;
use wgpool::history::{ReplayRecorder, write_torch_snapshot};
use wgpool::plot::{MemoryCurves, render_memory_svg, write_svg};
use wgpool::trace::{
    DEFAULT_MAX_INPUT_BYTES, ReadOptions, ReplayOptions, ReplayReport, read_trace, replay,
    replay_observed,
};

use super::{Failure, output};

#[derive(Args)]
pub struct ReplayArgs {
    /// Trace file: wgpool's `action,id,size,stream` CSV, RMM's logging_resource_adaptor CSV,
    /// or a PyTorch memory snapshot pickle (told apart by content).
    file: PathBuf,
    /// Configuration in WGPOOL_CONF syntax; defaults to the WGPOOL_CONF environment variable.
    #[arg(long)]
    conf: Option<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Device memory in MiB, for per_process_memory_fraction.
    #[arg(long, value_name = "MIB", conflicts_with = "device_memory_bytes")]
    device_memory_mb: Option<u64>,
    /// Device memory in bytes, for per_process_memory_fraction where the size is not a whole
    /// number of MiB (an H200 reports 150109880320 B).
    #[arg(long, value_name = "BYTES")]
    device_memory_bytes: Option<u64>,
    /// Check every allocation against the trace's ids, read as the addresses PyTorch handed
    /// out (`oom` rows: allocations PyTorch refused); new segments go where the trace says.
    #[arg(long)]
    oracle: bool,
    /// Add `memory_stats`: the statistics as `torch.cuda.memory_stats()` returns them.
    #[arg(long)]
    stats: bool,
    /// Check the engine's invariants after every operation (slow).
    #[arg(long)]
    check: bool,
    /// Refuse inputs larger than this many MiB (default 4096).
    #[arg(long, value_name = "MIB")]
    max_input_mb: Option<u64>,
    /// For a PyTorch snapshot with allocations on several devices: the device to replay.
    #[arg(long, value_name = "N")]
    trace_device: Option<usize>,
    /// Write the replay's history and final layout as a PyTorch memory snapshot pickle,
    /// which torch.cuda._memory_viz and the memory_viz page read.
    #[arg(long, value_name = "FILE")]
    snapshot: Option<PathBuf>,
    /// Draw live, allocated and reserved memory over the replay, the peak, and the segments
    /// created and released, as an SVG picture.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Replay under PyTorch's native allocator, PyTorch with expandable segments and
    /// wgpool's default (and --conf / WGPOOL_CONF when given) and print them in one table.
    #[arg(long, conflicts_with_all = ["snapshot", "plot", "check"])]
    compare: bool,
    /// Most events the snapshot keeps (the latest; default 1000000).
    #[arg(long, value_name = "N")]
    history_entries: Option<usize>,
    /// Replay through a real pool on the GPU (the adapter WGPU_ADAPTER_NAME and WGPU_BACKEND
    /// choose) and report device memory and driver time beside the engine's figures.
    #[arg(long, conflicts_with_all = ["compare", "oracle", "snapshot", "plot", "check", "stats"])]
    gpu: bool,
    /// With --gpu: divide every size by N, so that a large trace fits a small device.
    #[arg(long, value_name = "N", requires = "gpu", value_parser = clap::value_parser!(u64).range(1..))]
    scale: Option<u64>,
    /// With --gpu: replay the trace N times in one process, releasing the pool's cache
    /// between runs (as torch.cuda.empty_cache), and report the first run (a cold start)
    /// and the median of the rest.
    #[arg(long, value_name = "N", requires = "gpu", value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: Option<u32>,
    /// Replay the trace N times in a row on one engine with its cache kept, as a training
    /// loop runs the same steps again and again; what a pass leaves allocated is freed at
    /// its end. The figures cover the whole loop (engine replay; with --gpu, see --repeat).
    #[arg(long, value_name = "N", conflicts_with_all = ["gpu", "oracle"], value_parser = clap::value_parser!(u32).range(1..=100_000))]
    passes: Option<u32>,
    /// With --repeat: keep the pool's cache between runs instead of releasing it, so that
    /// the runs after the first measure the hot path (allocations that reuse cached memory).
    #[arg(long, requires = "repeat")]
    keep_cache: bool,
    /// With --gpu: take the pool's locks on every operation instead of biasing them to the
    /// replaying thread (PoolOptions::with_owner_bias(false)), to measure what the bias saves.
    #[arg(long, requires = "gpu")]
    no_owner_bias: bool,
    /// With --gpu: read the device heap's usage (VK_EXT_memory_budget) after every change
    /// of the pool's device memory in the first run, for heap_usage_peak_bytes. The reads
    /// are driver calls inside the first run's time (heap_query_s): off by default.
    #[arg(long, requires = "gpu")]
    heap_watch: bool,
}

/// Default of `--history-entries`.
const DEFAULT_HISTORY_ENTRIES: usize = 1_000_000;

/// `mb` MiB in bytes, or a message naming the option and the largest value it takes.
pub fn mib_to_bytes(mb: u64, option: &str) -> Result<u64, Failure> {
    mb.checked_mul(1 << 20).ok_or_else(|| {
        Failure::bad_input(format!(
            "{option} {mb}: at most {} MiB (16 EiB) can be expressed in bytes",
            u64::MAX >> 20
        ))
    })
}

pub fn run(args: ReplayArgs) -> Result<(), Failure> {
    if args.compare {
        return run_compare(&args);
    }
    if let Some(path) = &args.snapshot {
        output::check_output_file(path, "--snapshot")?;
    }
    if let Some(path) = &args.plot {
        output::check_output_file(path, "--plot")?;
    }
    let config = match &args.conf {
        Some(text) => Config::parse(text),
        None => Config::from_env(),
    }
    .map_err(Failure::bad_input)?;
    let device_memory = device_memory(&args)?;
    let trace = load(&args)?;
    // Said once the replay has run: a replay that fails says only why.
    let warnings = warnings(&trace, &config, device_memory, args.trace_device);
    let warn = || {
        for warning in &warnings {
            eprintln!("warning: {warning}");
        }
    };
    if args.gpu {
        let options = wgpool::trace::GpuReplayOptions::default()
            .with_scale(args.scale.unwrap_or(1))
            .with_repeat(args.repeat.unwrap_or(1))
            .with_keep_cache(args.keep_cache)
            .with_owner_bias(!args.no_owner_bias)
            .with_heap_watch(args.heap_watch)
            .with_device_memory(device_memory);
        return super::replay_gpu::run(&trace, &args.file, &config, &options, args.json, warn);
    }
    let options = ReplayOptions::default()
        .with_device_memory(device_memory)
        .with_check_every_op(args.check)
        .with_oracle(args.oracle)
        .with_stats(args.stats)
        .with_passes(args.passes.unwrap_or(1));
    // A loop is timed by as few more runs of it as fill the timing's 200 ms (at least one),
    // not by the five a single pass gets.
    let options = if options.passes > 1 {
        options.with_min_timed_runs(1)
    } else {
        options
    };
    let recording = args.snapshot.is_some() || args.plot.is_some();
    let mut recorder = ReplayRecorder::new(
        if args.snapshot.is_some() {
            args.history_entries.unwrap_or(DEFAULT_HISTORY_ENTRIES)
        } else {
            0
        },
        trace.ops.len() * args.passes.unwrap_or(1) as usize,
    );
    let report = if recording {
        replay_observed(&trace, &config, &options, &mut recorder)
    } else {
        replay(&trace, &config, &options)
    }
    .map_err(Failure::bad_input)?;
    warn();
    if let Some(path) = &args.snapshot {
        let snapshot = recorder.torch_snapshot(&report.conf);
        write_torch_snapshot(path, &snapshot).map_err(|e| output::file_failure(&e))?;
    }
    if let Some(path) = &args.plot {
        let title = format!(
            "{}: {} (peak reserved / peak live {:.3})",
            args.file.file_name().map_or_else(
                || args.file.display().to_string(),
                |n| n.to_string_lossy().into_owned()
            ),
            if report.conf.is_empty() {
                "defaults"
            } else {
                &report.conf
            },
            report.ratio
        );
        let curves = MemoryCurves {
            title,
            x_desc: "operation",
            samples: recorder.samples(),
            ops: recorder.ops(),
            peak_reserved: recorder.peak_reserved(),
        };
        render_memory_svg(&curves)
            .and_then(|svg| write_svg(path, &svg))
            .map_err(|e| output::file_failure(&e))?;
    }
    if args.json {
        return output::print_json(&report, "report");
    }
    output::print(&text_report(&args.file, trace.format.name(), &report))
}

fn text_report(file: &std::path::Path, format: &str, report: &ReplayReport) -> String {
    let conf = if report.conf.is_empty() {
        "(defaults)".to_string()
    } else {
        report.conf.clone()
    };
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("trace              {} ({format})", file.display()));
    line(format!(
        "conf               {conf}  (policy:{})",
        report.policy
    ));
    if report.passes > 1 {
        line(format!(
            "ops                {} ({} passes of {})",
            report.ops,
            report.passes,
            report.ops / u64::from(report.passes)
        ));
    } else {
        line(format!("ops                {}", report.ops));
    }
    line(format!(
        "peak live          {} ({} B)",
        bytes(report.peak_live_bytes),
        report.peak_live_bytes
    ));
    line(format!(
        "peak reserved      {} ({} B)",
        bytes(report.peak_reserved_bytes),
        report.peak_reserved_bytes
    ));
    line(format!("reserved / live    {:.4}", report.ratio));
    // Pages mode counts maps and unmaps where fixed segments count segments, as PyTorch's
    // num_device_alloc and num_device_free do.
    let (created, released) = if report.mode == "pages" {
        ("maps              ", "unmaps            ")
    } else {
        ("segments created  ", "segments released ")
    };
    line(format!(
        "{created} {} ({}, {:.2}x peak live)",
        report.segments_created,
        bytes(report.segment_bytes_created),
        report.churn
    ));
    line(format!("{released} {}", report.segments_released));
    line(format!(
        "alloc retries      {}   out-of-memory: {}",
        report.num_alloc_retries, report.num_ooms
    ));
    line(format!(
        "engine time        {:.1} ns/op (fastest of {} runs; median {:.1})",
        report.ns_per_op, report.timed_runs, report.ns_per_op_median
    ));
    if let Some(oracle) = &report.oracle {
        line(format!(
            "oracle             {} allocations checked, {} divergences",
            oracle.checked, oracle.divergences
        ));
        if let Some(first) = &oracle.first_divergence {
            line(format!(
                "first divergence   line {}: expected {:?}, got {:?}",
                oracle.first_divergence_line.unwrap_or(0),
                first.expected,
                first.got
            ));
            line(format!(
                "                   the expected address lies {}",
                first.expected_lies
            ));
            line(format!(
                "                   {} free blocks of the stream fit the {} B request",
                first.candidates_total, first.rounded
            ));
        }
    }
    if let Some(stats) = &report.memory_stats {
        for (key, value) in stats {
            line(format!("{key:<42} {value}"));
        }
    }
    out
}

/// `--compare`: the trace under each compared configuration.
fn run_compare(args: &ReplayArgs) -> Result<(), Failure> {
    let yours = match &args.conf {
        Some(text) => Some(text.clone()),
        None => std::env::var(wgpool::config::ENV_VAR).ok(),
    };
    let trace = load(args)?;
    let device_memory = device_memory(args)?;
    let options = ReplayOptions::default()
        .with_device_memory(device_memory)
        .with_min_timed_runs(1)
        .with_passes(args.passes.unwrap_or(1));
    super::compare::run(
        &trace,
        &args.file.display().to_string(),
        yours.as_deref(),
        &options,
        args.json,
    )
}

/// Reads the trace named on the command line, with the input limits of the options.
fn load(args: &ReplayArgs) -> Result<wgpool::trace::Trace, Failure> {
    let max_bytes = match args.max_input_mb {
        Some(mb) => mib_to_bytes(mb, "--max-input-mb")?,
        None => DEFAULT_MAX_INPUT_BYTES,
    };
    let read = ReadOptions::default()
        .with_max_bytes(max_bytes)
        .with_device(args.trace_device);
    read_trace(&args.file, &read)
        .map_err(|e| Failure::bad_input(format!("{}: {e}", args.file.display())))
}

/// What the user should know before trusting the replay: allocations the trace records as
/// refused with no cap to refuse them, a device size that sets no cap, and a device chosen
/// in an input that records only one.
fn warnings(
    trace: &wgpool::trace::Trace,
    config: &Config,
    device_memory: Option<u64>,
    trace_device: Option<usize>,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(device) = trace_device
        && trace.format != wgpool::trace::TraceFormat::TorchSnapshot
    {
        out.push(format!(
            "--trace-device {device} chooses a device of a PyTorch snapshot; this input is \
             {}, which records one device, so the whole trace was replayed",
            trace.format.name()
        ));
    }
    let cap = config.memory_cap(device_memory).ok().flatten();
    let refused = trace
        .ops
        .iter()
        .filter(|op| matches!(op, wgpool::trace::TraceOp::Refused { .. }))
        .count() as u64
        + trace.failed_allocs;
    if refused > 0 && cap.is_none() {
        out.push(format!(
            "the trace records {} the recording allocator refused (out of memory), but this \
             replay has no cap, so it serves what the device could not and reports no \
             out-of-memory; model the device with per_process_memory_fraction:1 and \
             --device-memory-mb (or --device-memory-bytes), or with memory_limit_mb",
            wgpool::format::count(refused, "allocation", "allocations")
        ));
    }
    if device_memory.is_some() && config.per_process_memory_fraction.is_none() {
        out.push(
            "--device-memory-mb / --device-memory-bytes only give the device size that \
             per_process_memory_fraction applies to, and this configuration has none, so they \
             set no cap; add per_process_memory_fraction:1 (or a smaller fraction) to --conf"
                .to_string(),
        );
    }
    out
}

/// The device size from `--device-memory-mb` or `--device-memory-bytes`, if given.
fn device_memory(args: &ReplayArgs) -> Result<Option<u64>, Failure> {
    match args.device_memory_mb {
        Some(mb) => Ok(Some(mib_to_bytes(mb, "--device-memory-mb")?)),
        None => Ok(args.device_memory_bytes),
    }
}
