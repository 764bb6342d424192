//! How the cost of one allocation plus one free grows with the number of live blocks.
//!
//! Each step allocates a block of a random size (log-uniform from 512 B to 64 MiB) and then
//! frees a random live block, so the live count stays at 1k, 10k or 100k. The engine runs
//! over virtual segments; both `policy:pytorch` and the default policy are measured.
//!
//! After the criterion groups, a quick interleaved timing prints ns per step at each size
//! and the ratio ns(100k) / ns(1k) (the target is below 2).
//!
//! `cargo bench --bench engine_scaling` (add `-- --quick` for a faster criterion pass).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use wgpool::bench::rng::SplitMix64;
use wgpool::config::Config;
use wgpool::engine::{BlockId, Engine, EngineLimits, VirtualSegments};

const LIVE_COUNTS: [usize; 3] = [1_000, 10_000, 100_000];
const POLICIES: [(&str, &str); 2] = [("pytorch", "policy:pytorch"), ("default", "")];

/// The benchmark's draws, from the crate's SplitMix64: small, fast and reproducible.
struct Rng(SplitMix64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0.next_f64()
    }

    fn below(&mut self, n: usize) -> usize {
        (self.0.next_u64() % n as u64) as usize
    }

    /// 512 B to 64 MiB, log-uniform.
    fn size(&mut self) -> u64 {
        let (lo, hi) = ((512f64).ln(), ((64u64 << 20) as f64).ln());
        (lo + self.unit() * (hi - lo)).exp() as u64
    }
}

/// An engine holding a constant number of live blocks.
struct Steady {
    engine: Engine,
    device: VirtualSegments,
    live: Vec<BlockId>,
    rng: Rng,
}

impl Steady {
    fn new(conf: &str, live: usize) -> Steady {
        let config = Config::parse(conf).expect("valid conf");
        let mut state = Steady {
            engine: Engine::new(config, EngineLimits::unlimited()).expect("engine"),
            device: VirtualSegments::unlimited(),
            live: Vec::with_capacity(live),
            rng: Rng(SplitMix64::new(0x5EED ^ live as u64)),
        };
        for _ in 0..live {
            let size = state.rng.size();
            let a = state
                .engine
                .allocate(size, 0, &mut state.device)
                .expect("no cap");
            state.live.push(a.block);
        }
        // Churn until the layout reaches its fragmented steady state.
        for _ in 0..live.max(20_000) {
            state.step();
        }
        state
    }

    /// One allocation of a random size, then one free of a random live block.
    #[inline]
    fn step(&mut self) {
        let size = self.rng.size();
        let a = self
            .engine
            .allocate(size, 0, &mut self.device)
            .expect("no cap");
        let victim = self.rng.below(self.live.len());
        let old = std::mem::replace(&mut self.live[victim], a.block);
        self.engine.free(old, &mut self.device).expect("live");
    }
}

fn alloc_free(c: &mut Criterion) {
    for (name, conf) in POLICIES {
        let mut group = c.benchmark_group(format!("alloc_free/{name}"));
        for live in LIVE_COUNTS {
            let mut state = Steady::new(conf, live);
            group.bench_function(BenchmarkId::from_parameter(live), |b| {
                b.iter(|| black_box(&mut state).step())
            });
        }
        group.finish();
    }
}

/// ns per step at each live count: the three engines are timed in turn, round after round,
/// so that load from other processes hits all of them alike; the minimum over rounds is the
/// least disturbed figure, the median the typical one.
fn ns_per_step(conf: &str) -> Vec<(f64, f64)> {
    const ROUNDS: usize = 9;
    const STEPS: u32 = 20_000;
    let mut states: Vec<Steady> = LIVE_COUNTS.iter().map(|&n| Steady::new(conf, n)).collect();
    let mut samples = vec![Vec::with_capacity(ROUNDS); states.len()];
    for _ in 0..ROUNDS {
        for (state, times) in states.iter_mut().zip(samples.iter_mut()) {
            let start = Instant::now();
            for _ in 0..STEPS {
                black_box(&mut *state).step();
            }
            times.push(start.elapsed().as_nanos() as f64 / STEPS as f64);
        }
    }
    for state in &states {
        state.engine.check_invariants().expect("invariants hold");
    }
    samples
        .into_iter()
        .map(|mut times| {
            times.sort_by(f64::total_cmp);
            (times[0], times[times.len() / 2])
        })
        .collect()
}

fn scaling_report() {
    println!();
    println!("alloc+free ns per step, min / median of 9 interleaved rounds of 20,000 steps:");
    println!(
        "{:<8} {:>15} {:>15} {:>15}  {:>16}",
        "policy", "1k", "10k", "100k", "100k/1k min, med"
    );
    for (name, conf) in POLICIES {
        let ns = ns_per_step(conf);
        let cell = |(min, median): (f64, f64)| format!("{min:.0} / {median:.0}");
        let (ratio_min, ratio_median) = (ns[2].0 / ns[0].0, ns[2].1 / ns[0].1);
        println!(
            "{:<8} {:>15} {:>15} {:>15}  {:>7.2}x {:>5.2}x {}",
            name,
            cell(ns[0]),
            cell(ns[1]),
            cell(ns[2]),
            ratio_min,
            ratio_median,
            if ratio_median < 2.0 {
                "(< 2x: ok)"
            } else {
                "(target < 2x)"
            }
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let listing_or_testing = args
        .iter()
        .any(|a| a == "--list" || a == "--test" || a == "--profile-time");
    let mut criterion = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    alloc_free(&mut criterion);
    criterion.final_summary();
    if !listing_or_testing {
        scaling_report();
    }
}
