//! `wgpool replay TRACE --gpu [--scale N]`: the trace through a real pool on the adapter.

use wgpool::config::Config;
use wgpool::engine::AllocError;
use wgpool::format::bytes;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::trace::{GpuReplayError, GpuReplayOptions, GpuReplayReport, Trace, replay_on_gpu};

use super::Failure;
use super::output;

/// Replays `trace` on the default adapter (`WGPU_ADAPTER_NAME`, `WGPU_BACKEND` choose it)
/// and prints the report, as JSON or text; `warn` says what the replay's reader should know,
/// once it has run.
pub fn run(
    trace: &Trace,
    file: &std::path::Path,
    config: &Config,
    options: &GpuReplayOptions,
    json: bool,
    warn: impl FnOnce(),
) -> Result<(), Failure> {
    let gpu = GpuContext::headless(&HeadlessOptions::default())
        .map_err(|error| Failure::gpu(&error, ""))?;
    let report = replay_on_gpu(trace, config, &gpu, options).map_err(|error| match error {
        GpuReplayError::Pool(error) => Failure::pool(&error, &file.display().to_string()),
        GpuReplayError::Alloc { position, source } => {
            let mut failure = Failure::alloc(&source, &format!("{}: {position}", file.display()));
            if matches!(*source, AllocError::TooLarge { .. }) {
                failure.message.push_str(
                    "; --scale N divides every size of the trace by N to fit a small device",
                );
            }
            failure
        }
        other => Failure::internal(format!("{}: {other}", file.display())),
    })?;
    warn();
    if json {
        return output::print_json(&report, "report");
    }
    output::print(&text_report(file, &report))
}

fn text_report(file: &std::path::Path, r: &GpuReplayReport) -> String {
    let conf = if r.conf.is_empty() {
        "(defaults)"
    } else {
        &r.conf
    };
    let heap = match r.heap_usage_peak_bytes {
        Some(b) => format!("{} ({b} B)", bytes(b)),
        None => "not reported (no VK_EXT_memory_budget)".to_string(),
    };
    [
        format!(
            "trace              {} (sizes / {})",
            file.display(),
            r.scale
        ),
        format!("adapter            {}", r.adapter),
        format!("conf               {conf}"),
        format!("mode               {} ({})", r.mode, r.mode_reason),
        format!("ops                {}", r.ops),
        format!(
            "peak live          {} ({} B)",
            bytes(r.peak_live_bytes),
            r.peak_live_bytes
        ),
        format!(
            "peak reserved      {} ({} B)",
            bytes(r.peak_reserved_bytes),
            r.peak_reserved_bytes
        ),
        format!(
            "reserved / live    {:.4}{}",
            r.ratio,
            match r.engine_peak_reserved_bytes {
                Some(engine) => format!(
                    " (the engine alone on this device: {:.4})",
                    engine as f64 / r.peak_live_bytes.max(1) as f64
                ),
                None => String::new(),
            }
        ),
        format!(
            "device memory peak {} ({} B, {:.4}x peak reserved)",
            bytes(r.device_memory_peak_bytes),
            r.device_memory_peak_bytes,
            r.device_over_reserved
        ),
        format!("heap usage peak    {heap}"),
        format!(
            "driver time        {:.3} s: memory {:.3} s ({} allocations), binds {:.3} s ({})",
            r.driver_time_s, r.allocation_time_s, r.device_allocations, r.bind_time_s, r.bind_calls
        ),
        format!(
            "alloc retries      {}   out-of-memory: {}",
            r.num_alloc_retries, r.num_ooms
        ),
        format!("wall time          {:.3} s", r.wall_time_s),
        format!(
            "pool time          {:.1} ns/op outside driver calls{}",
            r.pool_ns_per_op,
            match (r.engine_ns_per_op, r.pool_over_engine) {
                (Some(engine), Some(ratio)) =>
                    format!("; the engine alone {engine:.1} ns/op ({ratio:.2}x)"),
                _ => String::new(),
            }
        ),
    ]
    .into_iter()
    .chain(r.rest_median.iter().flat_map(|rest| {
        [
            format!(
                "repeat             {} runs; after the first, median: {:.3} s, driver {:.3} s, \
                 {:.1} ns/op outside driver calls",
                r.repeat, rest.replay_time_s, rest.driver_time_s, rest.pool_ns_per_op
            ),
            // The rest runs' peaks are peaks so far, so they include the first run's.
            format!(
                "over all runs      device memory peak {} ({:.4}x peak live), peak reserved {}",
                bytes(rest.device_memory_peak_bytes),
                rest.device_memory_peak_bytes as f64 / r.peak_live_bytes.max(1) as f64,
                bytes(rest.peak_reserved_bytes)
            ),
        ]
    }))
    .map(|line| format!("{line}\n"))
    .collect()
}
