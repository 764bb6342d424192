//! Pool alloc + free of a cached block against `create_buffer` + drop of the same size, side
//! by side in one run, on the default adapter (lavapipe when there is no GPU).
//!
//! `cargo bench --bench pool_alloc` (add `-- --quick` for a faster pass). The
//! `create_buffer` figure includes wgpu's deferred destruction: the bench polls the device
//! after each batch, as an application must eventually do. After the criterion groups a
//! report prints the speedup (the target is at least 20x).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use wgpool::bench::alloc_latency;
use wgpool::config::Config;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::pool::{DEFAULT_USAGE, Pool};

const SIZES: [u64; 3] = [4 << 10, 4 << 20, 64 << 20];

fn alloc_free(c: &mut Criterion, gpu: &GpuContext) {
    let pool = Pool::from_context(gpu, Config::default()).expect("a pool");
    let device = gpu.device();
    let mut group = c.benchmark_group("alloc_free");
    for size in SIZES {
        drop(pool.alloc(size).expect("a first block"));
        group.bench_function(BenchmarkId::new("pool", size), |b| {
            b.iter(|| {
                drop(black_box(
                    pool.alloc(black_box(size)).expect("cached block"),
                ))
            })
        });
        let descriptor = wgpu::BufferDescriptor {
            label: Some("bench create_buffer"),
            size,
            usage: DEFAULT_USAGE,
            mapped_at_creation: false,
        };
        group.bench_function(BenchmarkId::new("create_buffer", size), |b| {
            b.iter_custom(|iterations| {
                let start = std::time::Instant::now();
                for _ in 0..iterations {
                    drop(black_box(device.create_buffer(&descriptor)));
                }
                let _ = device.poll(wgpu::PollType::wait_indefinitely());
                start.elapsed()
            })
        });
    }
    group.finish();
}

fn main() {
    let gpu = match GpuContext::headless(&HeadlessOptions::default()) {
        Ok(gpu) => gpu,
        Err(error) => {
            eprintln!("pool_alloc bench needs an adapter: {error}");
            return;
        }
    };
    let listing = std::env::args().any(|a| a == "--list" || a == "--test");
    let mut criterion = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    alloc_free(&mut criterion, &gpu);
    criterion.final_summary();
    if !listing {
        println!(
            "\nalloc + free, median of 31 interleaved batches of 5000 (adapter: {}):",
            gpu.info().name
        );
        for size in SIZES {
            let r = alloc_latency::measure(&gpu, size, 5000, 31, 0).expect("measurement");
            println!(
                "  {:>9}: pool {:6.1} ns, create_buffer + drop {:7.1} ns: {:5.1}x {}",
                wgpool::format::bytes(size),
                r.pool_ns,
                r.create_buffer_ns,
                r.speedup,
                if r.speedup >= 20.0 {
                    "(>= 20x: ok)"
                } else {
                    "(target >= 20x)"
                }
            );
        }
    }
}
