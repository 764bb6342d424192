//! What the synchronization on the pool's hot path costs on this CPU, uncontended, one
//! thread: the reuse cache's flag (a compare-exchange and a release store, once when a block
//! parks and once when the next miss drains it), the pool's lock (a `std::sync::Mutex` lock
//! and unlock), a reference count up and down (`Arc` clone and drop, as a buffer handle
//! changes hands), against a loop of plain stores. The engine alone pays none of these, the
//! pool about four locked read-modify-writes per allocation and free; this tells whether
//! they explain the pool's time over the engine's on a given host.
//!
//! `cargo run --release --example sync_costs` prints one JSON object: nanoseconds per
//! iteration of each, the median of `--rounds` rounds of `--iterations` iterations.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn time(iterations: u64, mut step: impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    for i in 0..iterations {
        step(i);
    }
    start.elapsed().as_secs_f64() * 1e9 / iterations as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut iterations = 20_000_000u64;
    let mut rounds = 5usize;
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse::<u64>().ok());
        match (arg.as_str(), value) {
            ("--iterations", Some(n)) => iterations = n.max(1),
            ("--rounds", Some(n)) => rounds = n.max(1) as usize,
            _ => {
                eprintln!("usage: sync_costs [--iterations N] [--rounds N]");
                std::process::exit(2);
            }
        }
    }
    let flag = AtomicBool::new(false);
    let lock = Mutex::new(0u64);
    let shared = Arc::new(0u64);
    let mut sink = 0u64;
    let mut results: Vec<(&str, Vec<f64>)> = ["plain", "flag", "mutex", "arc"]
        .into_iter()
        .map(|name| (name, Vec::new()))
        .collect();
    for _ in 0..rounds {
        results[0].1.push(time(iterations, |i| {
            sink = black_box(sink.wrapping_add(i));
        }));
        results[1].1.push(time(iterations, |_| {
            let taken = flag
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
            black_box(taken);
            flag.store(false, Ordering::Release);
        }));
        results[2].1.push(time(iterations, |i| {
            let mut guard = lock.lock().unwrap_or_else(|e| e.into_inner());
            *guard = guard.wrapping_add(i);
        }));
        results[3].1.push(time(iterations, |_| {
            let clone = Arc::clone(black_box(&shared));
            drop(black_box(clone));
        }));
    }
    let fields: Vec<String> = results
        .into_iter()
        .map(|(name, values)| format!("\"{name}_ns\": {:.2}", median(values)))
        .collect();
    println!(
        "{{{}, \"iterations\": {iterations}, \"rounds\": {rounds}}}",
        fields.join(", ")
    );
    black_box(sink);
}
