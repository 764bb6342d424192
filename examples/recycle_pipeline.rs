//! What recycling pages costs an application that keeps GPU work in flight: a random mix of
//! allocations, each filled by a kernel submitted at once (nothing waits for the GPU in the
//! loop), blocks dropped at random, under several configurations in turn. One JSON object.
//!
//! A recycle unmaps idle pages after all work submitted before it and maps them where the
//! request goes before any later work; `compact_recycle_rate:0` recycles less and fixed
//! segments not at all. The wall time of the whole loop, through the final wait for the GPU,
//! is the figure to compare, beside device memory.
//!
//! `cargo run --release --example recycle_pipeline -- --allocations 3000 --live-mib 512`

use std::time::Instant;

use clap::Parser;
use serde::Serialize;
use wgpool::bench::rng::SplitMix64;
use wgpool::config::Config;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::kernels::{KernelCall, Kernels};
use wgpool::pool::{Block, DeviceMemoryUsage, Pool};

#[derive(Parser)]
struct Args {
    /// Allocations per run.
    #[arg(long, default_value_t = 3000)]
    allocations: usize,
    /// Most live memory, in MiB; the largest request is an eighth of it.
    #[arg(long, default_value_t = 512)]
    live_mib: u64,
    /// Configurations to compare (repeatable; default: the default, `compact_recycle_rate:0`
    /// and `expandable_segments:False`).
    #[arg(long = "conf")]
    confs: Vec<String>,
    /// Rounds, each running every configuration once.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Seed of the random mix (the same in every run).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Submit no kernels: time the pool's allocations and frees alone.
    #[arg(long)]
    no_kernels: bool,
}

#[derive(Serialize)]
struct Run {
    round: usize,
    conf: String,
    mode: String,
    wall_s: f64,
    device_bytes_peak: u64,
    peak_live_bytes: u64,
    driver_time_s: f64,
    bind_calls: u64,
    /// Times the pool ordered all later GPU work after all submitted work, to reuse bytes
    /// reached through several wrappers (pages mode).
    wrapper_orderings: u64,
    /// CPU time of those orderings, in seconds.
    ordering_s: f64,
    /// CPU waits for the GPU before pages were unmapped, and for pending binds before
    /// chunks were freed or ranges released, in seconds.
    unmap_wait_s: f64,
    allocations: u64,
    frees: u64,
    ranges_created: u64,
    ranges_released: u64,
    wrappers_created: u64,
    /// Of `driver_time_s`: creating and releasing ranges and their wrappers.
    range_s: f64,
    /// Time dropping the blocks still live after the last allocation.
    drop_rest_s: f64,
    /// The final wait for the GPU to finish everything submitted (in pages mode, work that
    /// waits on the GPU for binds waits for them to be applied).
    final_wait_s: f64,
    /// Where the pool's time went, operation by operation.
    ops: OpTimes,
}

/// The time of every `alloc` and every drop, split by what the memory layer did during the
/// operation, and the part of it that no counter of the memory layer accounts for (the
/// operation's time minus its driver time, unmap waits and orderings).
#[derive(Default, Serialize)]
struct OpTimes {
    alloc_s: f64,
    free_s: f64,
    unaccounted_s: f64,
    /// Operations with no bind, range or wrapper: in pages mode a cache hit, a placement in
    /// memory already mapped, or an ordering; with segments every operation, the ones that
    /// create or destroy a buffer included.
    quiet: OpClass,
    /// Operations with a bind, and no range or wrapper made.
    bind: OpClass,
    /// Operations that created or released a range.
    range: OpClass,
    /// Operations that made a wrapper (and no range).
    wrapper: OpClass,
    /// The ten operations with the most unaccounted time.
    slowest: Vec<SlowOp>,
}

#[derive(Default, Serialize)]
struct OpClass {
    count: u64,
    total_s: f64,
    unaccounted_s: f64,
}

#[derive(Serialize)]
struct SlowOp {
    /// `alloc` or `free`.
    op: &'static str,
    /// The allocation's number (for a free, the allocation after which it happened).
    index: usize,
    total_s: f64,
    unaccounted_s: f64,
    bind_calls: u64,
    ranges: u64,
    wrappers: u64,
}

impl OpTimes {
    /// Counts one operation that took `total` seconds, with `before` and `after` the
    /// memory layer's counters around it.
    fn add(
        &mut self,
        (op, index): (&'static str, usize),
        total: f64,
        before: &DeviceMemoryUsage,
        after: &DeviceMemoryUsage,
    ) {
        let waited = |u: &DeviceMemoryUsage| {
            (u.driver_time + u.unmap_wait_time + u.ordering_time).as_secs_f64()
        };
        let unaccounted = (total - (waited(after) - waited(before))).max(0.0);
        let binds = after.bind_calls - before.bind_calls;
        let ranges = (after.ranges_created + after.ranges_released)
            - (before.ranges_created + before.ranges_released);
        let wrappers = after.wrappers_created - before.wrappers_created;
        let class = if ranges > 0 {
            &mut self.range
        } else if wrappers > 0 {
            &mut self.wrapper
        } else if binds > 0 {
            &mut self.bind
        } else {
            &mut self.quiet
        };
        class.count += 1;
        class.total_s += total;
        class.unaccounted_s += unaccounted;
        self.unaccounted_s += unaccounted;
        if op == "alloc" {
            self.alloc_s += total;
        } else {
            self.free_s += total;
        }
        self.slowest.push(SlowOp {
            op,
            index,
            total_s: total,
            unaccounted_s: unaccounted,
            bind_calls: binds,
            ranges,
            wrappers,
        });
        if self.slowest.len() > 64 {
            self.keep_slowest();
        }
    }

    fn keep_slowest(&mut self) {
        self.slowest
            .sort_by(|a, b| b.unaccounted_s.total_cmp(&a.unaccounted_s));
        self.slowest.truncate(10);
    }
}

#[derive(Serialize)]
struct Report {
    adapter: String,
    kernels: bool,
    allocations: usize,
    live_bytes_bound: u64,
    runs: Vec<Run>,
}

fn run_once(
    gpu: &GpuContext,
    kernels: &Kernels,
    conf: &str,
    args: &Args,
    round: usize,
) -> Result<Run, Box<dyn std::error::Error>> {
    let pool = Pool::from_context(gpu, Config::parse(conf)?)?;
    let bound = args.live_mib << 20;
    let largest = (bound / 8).max(4096) as f64;
    let mut rng = SplitMix64::new(args.seed);
    // Each block with a Pareto lifetime (shape 1.2): the shortest-lived goes first most of
    // the time, so that a few blocks stay long and the live set fragments.
    let mut live: Vec<(Block, f64)> = Vec::new();
    let mut live_bytes = 0u64;
    let mut peak_live = 0u64;
    let mut ops = OpTimes::default();
    let start = Instant::now();
    for i in 0..args.allocations {
        // Log-uniform from 4 KiB to the largest request, in whole words.
        let size = ((4096f64.ln() + rng.next_f64() * (largest.ln() - 4096f64.ln())).exp() as u64)
            .div_ceil(4)
            * 4;
        let before = pool.device_memory_usage();
        let began = Instant::now();
        let block = pool.alloc(size)?;
        let took = began.elapsed().as_secs_f64();
        ops.add(("alloc", i), took, &before, &pool.device_memory_usage());
        if !args.no_kernels {
            let mut encoder = gpu.device().create_command_encoder(&Default::default());
            kernels.record(&mut encoder, &KernelCall::fill(block.operand(), i as u32))?;
            pool.submit([encoder.finish()]);
        }
        live_bytes += size;
        peak_live = peak_live.max(live_bytes);
        live.push((block, (1.0 - rng.next_f64()).powf(-1.0 / 1.2)));
        while live_bytes > bound || (!live.is_empty() && rng.next_f64() < 0.5) {
            let index = if rng.next_f64() < 0.7 {
                (0..live.len())
                    .min_by(|&a, &b| live[a].1.total_cmp(&live[b].1))
                    .unwrap_or(0)
            } else {
                (rng.next_f64() * live.len() as f64) as usize % live.len()
            };
            let (block, _) = live.swap_remove(index);
            live_bytes -= block.size();
            let before = pool.device_memory_usage();
            let began = Instant::now();
            drop(block);
            let took = began.elapsed().as_secs_f64();
            ops.add(("free", i), took, &before, &pool.device_memory_usage());
        }
    }
    let began = Instant::now();
    drop(live);
    let drop_rest = began.elapsed().as_secs_f64();
    let began = Instant::now();
    gpu.wait_idle()?;
    let final_wait = began.elapsed().as_secs_f64();
    let wall = start.elapsed().as_secs_f64();
    let usage = pool.device_memory_usage();
    Ok(Run {
        round,
        conf: conf.to_string(),
        mode: format!("{:?}", usage.mode),
        wall_s: wall,
        device_bytes_peak: usage.device_bytes_peak,
        peak_live_bytes: peak_live,
        driver_time_s: usage.driver_time.as_secs_f64(),
        bind_calls: usage.bind_calls,
        wrapper_orderings: usage.wrapper_orderings,
        ordering_s: usage.ordering_time.as_secs_f64(),
        unmap_wait_s: usage.unmap_wait_time.as_secs_f64(),
        allocations: usage.allocations,
        frees: usage.frees,
        ranges_created: usage.ranges_created,
        ranges_released: usage.ranges_released,
        wrappers_created: usage.wrappers_created,
        range_s: usage.range_time.as_secs_f64(),
        drop_rest_s: drop_rest,
        final_wait_s: final_wait,
        ops: {
            ops.keep_slowest();
            ops
        },
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let gpu = GpuContext::headless(&HeadlessOptions::default())?;
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let confs = if args.confs.is_empty() {
        vec![
            String::new(),
            "compact_recycle_rate:0".to_string(),
            "expandable_segments:False".to_string(),
        ]
    } else {
        args.confs.clone()
    };
    let mut runs = Vec::new();
    for round in 1..=args.rounds {
        for conf in &confs {
            runs.push(run_once(&gpu, &kernels, conf, &args, round)?);
        }
    }
    let report = Report {
        adapter: gpu.info().name.clone(),
        kernels: !args.no_kernels,
        allocations: args.allocations,
        live_bytes_bound: args.live_mib << 20,
        runs,
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
