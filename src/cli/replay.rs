//! `wgpool replay FILE [--conf STR] [--json]`.

use std::path::PathBuf;

use clap::Args;
use wgpool::config::Config;
use wgpool::format::bytes;
use wgpool::trace::{ReplayOptions, parse_trace, replay};

use super::Failure;

#[derive(Args)]
pub struct ReplayArgs {
    /// Trace file in the `action,id,size,stream` CSV format.
    file: PathBuf,
    /// Configuration in WGPOOL_CONF syntax; defaults to the WGPOOL_CONF environment variable.
    #[arg(long)]
    conf: Option<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Device memory in MiB, for per_process_memory_fraction.
    #[arg(long, value_name = "MIB")]
    device_memory_mb: Option<u64>,
    /// Check the engine's invariants after every operation (slow).
    #[arg(long)]
    check: bool,
}

pub fn run(args: ReplayArgs) -> Result<(), Failure> {
    let config = match &args.conf {
        Some(text) => Config::parse(text),
        None => Config::from_env(),
    }
    .map_err(Failure::bad_input)?;
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| Failure::bad_input(format!("cannot read {}: {e}", args.file.display())))?;
    let trace = parse_trace(&text)
        .map_err(|e| Failure::bad_input(format!("{}: {e}", args.file.display())))?;
    let options = ReplayOptions::default()
        .with_device_memory(args.device_memory_mb.map(|mb| mb << 20))
        .with_check_every_op(args.check);
    let report = replay(&trace, &config, &options).map_err(Failure::bad_input)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        let conf = if report.conf.is_empty() {
            "(defaults)".to_string()
        } else {
            report.conf.clone()
        };
        println!("trace              {}", args.file.display());
        println!("conf               {conf}  (policy:{})", report.policy);
        println!("ops                {}", report.ops);
        println!(
            "peak live          {} ({} B)",
            bytes(report.peak_live_bytes),
            report.peak_live_bytes
        );
        println!(
            "peak reserved      {} ({} B)",
            bytes(report.peak_reserved_bytes),
            report.peak_reserved_bytes
        );
        println!("reserved / live    {:.4}", report.ratio);
        println!(
            "segments created   {} ({}, {:.2}x peak live)",
            report.segments_created,
            bytes(report.segment_bytes_created),
            report.churn
        );
        println!("segments released  {}", report.segments_released);
        println!(
            "alloc retries      {}   out-of-memory: {}",
            report.num_alloc_retries, report.num_ooms
        );
        println!(
            "engine time        {:.1} ns/op (fastest of {} runs; median {:.1})",
            report.ns_per_op, report.timed_runs, report.ns_per_op_median
        );
    }
    Ok(())
}
