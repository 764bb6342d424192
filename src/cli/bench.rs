//! `wgpool bench [--json] [--quick] [--size-mb N] [--adapter NAME] [--conf STR] ...`: kernels
//! on pool blocks and raw buffers, and in-device moves, each verified before it is timed.

use std::io::IsTerminal;

use wgpool::bench::oversubscription::{self, OversubscriptionConfig, OversubscriptionReport};
use wgpool::bench::timing::RunCounts;
use wgpool::bench::{
    BenchConfig, BenchError, BenchEvent, alloc_latency, default_placements_with, run_bench, table,
};
use wgpool::config::Config;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::kernels::{Kernel, KernelError, KernelOptions};

use super::{Failure, output};
use wgpool::plot::{Bar, BarGroup, BarPanel};

/// Block size of the allocation-latency measurement: a block of the large kind.
const ALLOC_BENCH_BYTES: u64 = 4 << 20;

/// Fewest timed runs a median is taken over.
const MIN_RUNS: u32 = 10;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Small operands and few runs: under a minute even on a software device.
    #[arg(long)]
    quick: bool,
    /// MiB per operand (default: 8 with --quick, 64 on CPU devices, 1024 on GPUs, or 1/32 of a smaller GPU's memory rounded down to a power of two).
    #[arg(long, value_name = "N")]
    size_mb: Option<u64>,
    /// Use the first adapter whose name contains NAME (case-insensitive); overrides
    /// WGPU_ADAPTER_NAME.
    #[arg(long, value_name = "NAME")]
    adapter: Option<String>,
    /// Timed runs per measurement, at least 10 (default: 10 with --quick, else 20); a kernel's placements are timed in 3 interleaved rounds that share them.
    #[arg(long, value_name = "N")]
    runs: Option<u32>,
    /// Untimed warm-up runs before each measurement (default: 2 with --quick, else 3).
    #[arg(long, value_name = "N")]
    warmup: Option<u32>,
    /// Warm up for at least this many milliseconds of back-to-back runs before each
    /// measurement, so the GPU's clocks are up (default: 50 on CPU devices; on GPUs 1000,
    /// or 500 with --quick: an H200 that idled needs about a second to reach full clocks).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=600_000))]
    warmup_ms: Option<u64>,
    /// Also measure host transfers: staging-pool uploads and downloads against wgpu's own
    /// paths, and offload / prefetch of a pool block (`transfers` in the JSON).
    #[arg(long)]
    transfers: bool,
    /// Also measure oversubscription: a stream over 1.5x and 3x a device budget and a hot
    /// set beside cold blocks over it, served by residency, `overflow:host` and offload /
    /// prefetch by hand, against the pool's own host-to-device rate (`oversubscription` in
    /// the JSON). Blocks are --size-mb each.
    #[arg(long)]
    oversubscription: bool,
    /// The device budget of --oversubscription in MiB, at least four blocks (default: 16
    /// blocks of --size-mb).
    #[arg(long, value_name = "N", requires = "oversubscription")]
    budget_mb: Option<u64>,
    /// Time with the wall clock even where GPU timestamps exist.
    #[arg(long)]
    wall: bool,
    /// Seed of the random inputs (default: from the clock; the report shows it).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Only these kernels, comma-separated `name_dtype` (copy_f32, scale_f32, add_f32,
    /// triad_f32, copy_f16, triad_f16, fill_u32, fill_pattern_u32, checksum_u32, compare_u32).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    kernels: Option<Vec<String>>,
    /// Draw the kernel, move and transfer rates by placement as an SVG picture.
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,
    /// Most workgroups per dispatch (default: the device's limit); the grid-stride loop
    /// covers the rest.
    #[arg(long, value_name = "N")]
    max_workgroups: Option<u32>,
    /// Configuration of the pool behind the `pool` and `host` placements, in WGPOOL_CONF
    /// syntax (default: policy:pytorch,expandable_segments:auto, which maps pages where the
    /// device can); `expandable_segments:False` measures fixed segments.
    #[arg(long, value_name = "STR")]
    conf: Option<String>,
}

/// `name_dtype` of a kernel, as `--kernels` takes it.
fn kernel_id(kernel: Kernel) -> String {
    format!("{}_{}", kernel.name(), kernel.dtype().as_str())
}

fn parse_kernels(names: &[String]) -> Result<Vec<Kernel>, Failure> {
    let benchable: Vec<Kernel> = Kernel::ALL
        .into_iter()
        .filter(|&k| k != Kernel::Move)
        .collect();
    names
        .iter()
        .map(|name| {
            benchable
                .iter()
                .copied()
                .find(|&k| kernel_id(k) == name.trim())
                .ok_or_else(|| {
                    let allowed: Vec<String> = benchable.iter().map(|&k| kernel_id(k)).collect();
                    Failure::bad_input(format!(
                        "--kernels: unknown kernel {name:?}; allowed: {}",
                        allowed.join(", ")
                    ))
                })
        })
        .collect()
}

pub fn run(args: BenchArgs) -> Result<(), Failure> {
    let runs = args.runs.unwrap_or(if args.quick { 10 } else { 20 });
    if runs < MIN_RUNS {
        return Err(Failure::bad_input(format!(
            "--runs {runs}: at least {MIN_RUNS} timed runs are needed for a median"
        )));
    }
    let kernels = args.kernels.as_deref().map(parse_kernels).transpose()?;
    let pool_config = match &args.conf {
        Some(conf) => Config::parse(conf)
            .map_err(|error| Failure::bad_input(format!("--conf {conf:?}: {error}")))?,
        None => wgpool::bench::pool_placement::default_config(),
    };
    if let Some(path) = &args.plot {
        output::check_output_file(path, "--plot")?;
    }
    if args.size_mb == Some(0) {
        return Err(Failure::bad_input(
            "--size-mb 0: the size must be at least 1 MiB",
        ));
    }
    let mut headless = HeadlessOptions::default();
    headless.adapter_name = args.adapter.clone();
    let ctx = GpuContext::headless(&headless).map_err(|error| Failure::gpu(&error, ""))?;
    // On a lost device every later step fails in its own way (a map that fails, a check
    // that reads nothing); the loss is what the user needs to hear.
    bench_on(&ctx, &args, runs, kernels, &pool_config).map_err(|failure| {
        match ctx.errors().check_device() {
            Err(lost) => Failure::internal(format!("the benchmark's device: {lost}")),
            Ok(()) => failure,
        }
    })
}

/// `bench` once the device is open: measures, then prints.
fn bench_on(
    ctx: &GpuContext,
    args: &BenchArgs,
    runs: u32,
    kernels: Option<Vec<Kernel>>,
    pool_config: &Config,
) -> Result<(), Failure> {
    // Every placement of a kernel holds its operands at once (raw and pool on the device),
    // so the default leaves a small device most of its memory: at most 1/32 of it per operand.
    let device_share_mb = ctx
        .memory_info()
        .and_then(|info| info.device_local_bytes())
        .map_or(1024, |bytes| {
            let mb = (bytes / 32) >> 20;
            if mb == 0 {
                16
            } else {
                (1u64 << (63 - mb.leading_zeros())).max(16)
            }
        });
    let size_mb = args.size_mb.unwrap_or(if args.quick {
        8
    } else if ctx.info().device_type == wgpu::DeviceType::Cpu {
        64
    } else {
        device_share_mb.min(1024)
    });
    let size_bytes = size_mb.saturating_mul(1 << 20);
    // The same-buffer move needs two operands and 1.5 KiB of gaps in one buffer.
    let max_mb = (ctx.limits().max_buffer_size.saturating_sub(1536) / 2) >> 20;
    if size_mb > max_mb {
        return Err(Failure::bad_input(format!(
            "--size-mb {size_mb}: this device allows at most {max_mb} MiB per operand (two operands must fit one buffer of max_buffer_size {} bytes)",
            ctx.limits().max_buffer_size
        )));
    }
    // Checked before the kernels run, not after them: a wrong budget loses no run.
    let oversubscription_config = if args.oversubscription {
        let budget = args
            .budget_mb
            .map_or(16 * size_bytes, |mb| mb.saturating_mul(1 << 20));
        let (warmup, timed) = if args.quick { (1, 3) } else { (1, 5) };
        let config = OversubscriptionConfig::new(size_bytes, budget).with_passes(warmup, timed);
        config
            .validate()
            .map_err(|error| Failure::bad_input(error.to_string()))?;
        Some(config)
    } else {
        None
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let min_warmup_ms =
        args.warmup_ms
            .unwrap_or(if ctx.info().device_type == wgpu::DeviceType::Cpu {
                50
            } else if args.quick {
                500
            } else {
                1000
            });
    let config = BenchConfig {
        size_bytes,
        counts: RunCounts {
            warmup: args.warmup.unwrap_or(if args.quick { 2 } else { 3 }),
            min_warmup: std::time::Duration::from_millis(min_warmup_ms),
            timed: runs,
        },
        force_wall: args.wall,
        seed,
        kernels,
        kernel_options: {
            let mut kernel_options = KernelOptions::default();
            kernel_options.max_workgroups = args.max_workgroups;
            kernel_options
        },
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
                .expect("valid progress template"),
        );
        bar
    });
    let mut started = false;
    let mut progress = |event: BenchEvent<'_>| {
        if let Some(bar) = &bar {
            match event {
                BenchEvent::Plan { steps } => bar.set_length(steps),
                BenchEvent::Step { label } => {
                    if started {
                        bar.inc(1);
                    }
                    started = true;
                    bar.set_message(label.to_string());
                }
            }
        }
    };
    let result = default_placements_with(ctx, pool_config)
        .and_then(|mut placements| run_bench(ctx, &config, &mut placements, &mut progress));
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let report = result.map_err(|error| match &error {
        BenchError::Verification { .. } => {
            Failure::internal(format!("{error}; nothing was timed after it"))
        }
        BenchError::Config(_) | BenchError::Kernel(KernelError::BadOption { .. }) => {
            Failure::bad_input(error)
        }
        BenchError::Pool { conf, source } => {
            Failure::pool(source, &format!("the pool of `{conf}`"))
        }
        BenchError::Alloc { size, source } => {
            Failure::alloc(source, &format!("pool block of {size} bytes"))
        }
        _ => Failure::internal(&error),
    })?;
    let mut report = report;
    let alloc = alloc_latency::measure(
        ctx,
        ALLOC_BENCH_BYTES,
        2000,
        if args.quick { 11 } else { 31 },
        if args.quick { 2 } else { 5 },
    )
    .map_err(|error| Failure::internal(format!("allocation latency: {error}")))?;
    report.alloc = Some(serde_json::to_value(&alloc).expect("alloc report serializes"));
    let transfers = if args.transfers {
        Some(transfers_and_moves(ctx, size_bytes, args.quick)?)
    } else {
        None
    };
    let oversubscription = match &oversubscription_config {
        Some(config) => Some(oversubscription::measure(ctx, config).map_err(
            |error| match &error {
                BenchError::Config(_) => Failure::bad_input(error.to_string()),
                _ => Failure::internal(format!("oversubscription: {error}")),
            },
        )?),
        None => None,
    };
    // Every section ran on this device; figures of work a lost device dropped are not printed.
    if let Err(lost) = ctx.errors().check_device() {
        return Err(Failure::internal(format!("the benchmark's device: {lost}")));
    }
    report.oversubscription = oversubscription
        .as_ref()
        .map(|o| serde_json::to_value(o).expect("oversubscription report serializes"));
    report.transfers = transfers
        .as_ref()
        .map(|t| serde_json::to_value(t).expect("transfer report serializes"));
    if let Some(path) = &args.plot {
        let panels = plot_panels(&report, transfers.as_ref());
        wgpool::plot::render_bars_svg(&panels)
            .and_then(|svg| wgpool::plot::write_svg(path, &svg))
            .map_err(|e| super::output::file_failure(&e))?;
    }
    if args.json {
        output::print_json(&report, "report")?;
    } else {
        let mut text = table::render(&report);
        text.push_str(&format!(
            "\nalloc + free of a cached {} block: pool {:.0} ns, create_buffer + drop {:.0} ns ({:.0} ns without the deferred destroy): {:.1}x\n",
            wgpool::format::bytes(alloc.size_bytes),
            alloc.pool_ns,
            alloc.create_buffer_ns,
            alloc.create_buffer_without_destroy_ns,
            alloc.speedup
        ));
        for row in &alloc.rows {
            text.push_str(&format!(
                "  {:<8} cached block {:.0} ns; {} (sizes / {}, median of {} runs after the \
                 first), pool ns/op outside driver calls: {:.0} with the cache kept (hot \
                 path), {:.2}x the engine alone's {:.0}; {:.0} from an empty cache, {:.2}x \
                 its {:.0}\n",
                row.mode.to_string(),
                row.cached_ns,
                row.trace,
                row.scale,
                row.runs - 1,
                row.hot_pool_ns_per_op,
                row.hot_pool_over_engine,
                row.hot_engine_ns_per_op,
                row.pool_ns_per_op,
                row.pool_over_engine,
                row.engine_ns_per_op,
            ));
        }
        if let Some(t) = &transfers {
            text.push_str(&transfers_table(t));
        }
        if let Some(o) = &oversubscription {
            text.push_str(&oversubscription_table(o));
        }
        output::print(&text)?;
    }
    Ok(())
}

/// The `--transfers` figures: the staging pool's rows, and offload / prefetch.
#[derive(serde::Serialize)]
struct Transfers {
    #[serde(flatten)]
    staging: wgpool::bench::transfers::TransferReport,
    offload_gbps: f64,
    prefetch_gbps: f64,
    residency: wgpool::bench::residency_moves::ResidencyMoves,
}

/// The staging pool's transfers and the pool's offload and prefetch, for `--transfers`.
fn transfers_and_moves(
    ctx: &GpuContext,
    size_bytes: u64,
    quick: bool,
) -> Result<Transfers, Failure> {
    use wgpool::bench::{residency_moves, transfers};
    let failed =
        |what: &str, error: &dyn std::fmt::Display| Failure::internal(format!("{what}: {error}"));
    let mut config = transfers::TransferBenchConfig::new(size_bytes);
    if !quick {
        config.counts = RunCounts::new(3, 11);
    }
    let staging =
        transfers::measure_transfers(ctx, &config).map_err(|e| failed("transfers", &e))?;
    let (warmup, runs) = if quick { (1, 5) } else { (2, 11) };
    let residency = residency_moves::measure(ctx, size_bytes, warmup, runs)
        .map_err(|e| failed("offload/prefetch", &e))?;
    Ok(Transfers {
        offload_gbps: residency.offload_gbps,
        prefetch_gbps: residency.prefetch_gbps,
        staging,
        residency,
    })
}

fn oversubscription_table(o: &OversubscriptionReport) -> String {
    let mut out = format!(
        "\noversubscription: blocks of {}, device budget {}; the pool's host-to-device copy \
         {:.1} GB/s (device-to-host {:.1}; Pool::prefetch {:.1}, Pool::offload {:.1}); median \
         of {} passes, bytes read + written:\n",
        wgpool::format::bytes(o.block_bytes),
        wgpool::format::bytes(o.budget_bytes),
        o.host_to_device_gbps,
        o.device_to_host_gbps,
        o.prefetch_gbps,
        o.offload_gbps,
        o.timed_passes
    );
    out.push_str(
        "  stream             working set   effective   / host-to-device   moved in / out\n",
    );
    for row in &o.stream {
        out.push_str(&format!(
            "  {:<18} {:>5.1}x budget {:>8.2} GB/s {:>10.2}x {:>12.2} / {:.2} GB/s\n",
            row.strategy.name(),
            row.working_set_over_budget,
            row.effective_gbps,
            row.over_host_to_device,
            row.to_device_gbps,
            row.to_host_gbps
        ));
    }
    out.push_str(&format!(
        "  hot set of {} beside {} of cold blocks:\n",
        wgpool::format::bytes(o.hot_bytes),
        wgpool::format::bytes(o.cold_bytes)
    ));
    for row in &o.hot_set {
        out.push_str(&format!(
            "  {:<18} {:>8.2} GB/s {:>6.3}x in_budget, {} moved\n",
            row.strategy.name(),
            row.effective_gbps,
            row.over_in_budget,
            wgpool::format::bytes(row.moved_bytes)
        ));
    }
    for skipped in &o.skipped {
        out.push_str(&format!(
            "  {:<18} not run: {}\n",
            skipped.strategy.name(),
            skipped.reason
        ));
    }
    out
}

fn transfers_table(t: &Transfers) -> String {
    let mut out = format!(
        "\nhost transfers of {} (median of {} runs):\n",
        wgpool::format::bytes(t.staging.size_bytes),
        t.staging.timed_runs
    );
    for row in &t.staging.rows {
        out.push_str(&format!(
            "  {:<34} {:>8.1} GB/s  {}\n",
            row.name, row.gbps, row.what
        ));
    }
    out.push_str(&format!(
        "  {:<34} {:>8.1} GB/s  Pool::offload, device to host\n",
        "offload", t.offload_gbps
    ));
    out.push_str(&format!(
        "  {:<34} {:>8.1} GB/s  Pool::prefetch, host to device\n",
        "prefetch", t.prefetch_gbps
    ));
    out
}

/// The `--plot` panels: kernel rates by placement, in-device moves, and host transfers.
fn plot_panels(
    report: &wgpool::bench::BenchReport,
    transfers: Option<&Transfers>,
) -> Vec<BarPanel> {
    let mut kernels: Vec<BarGroup> = Vec::new();
    for row in &report.kernels {
        let label = format!("{}_{}", row.name, row.dtype);
        let bar = Bar {
            series: row.placement.clone(),
            value: row.gbps,
        };
        match kernels.iter_mut().find(|g| g.label == label) {
            Some(group) => group.bars.push(bar),
            None => kernels.push(BarGroup {
                label,
                bars: vec![bar],
            }),
        }
    }
    let one = |label: &str, value: f64| BarGroup {
        label: label.to_string(),
        bars: vec![Bar {
            series: "GB/s".to_string(),
            value,
        }],
    };
    let m = &report.moves;
    let mut panels = vec![
        BarPanel {
            title: format!(
                "kernels on {} operands, by placement ({}; read+write GB/s)",
                wgpool::format::bytes(report.size_bytes),
                report.adapter.name
            ),
            unit: "GB/s".to_string(),
            groups: kernels,
        },
        BarPanel {
            title: format!("in-device moves of {}", wgpool::format::bytes(m.size_bytes)),
            unit: "GB/s (read+write)".to_string(),
            groups: vec![
                one("copy kernel, two buffers", m.kernel_gbps),
                one("copy_buffer_to_buffer", m.copy_buffer_gbps),
                one("copy kernel, one buffer", m.kernel_same_buffer_gbps),
            ],
        },
    ];
    if let Some(t) = transfers {
        let mut groups: Vec<BarGroup> = t
            .staging
            .rows
            .iter()
            .map(|r| one(&r.name, r.gbps))
            .collect();
        groups.push(one("offload (device to host)", t.offload_gbps));
        groups.push(one("prefetch (host to device)", t.prefetch_gbps));
        panels.push(BarPanel {
            title: format!(
                "host transfers of {}",
                wgpool::format::bytes(t.staging.size_bytes)
            ),
            unit: "GB/s".to_string(),
            groups,
        });
    }
    panels
}
