//! A random mix of allocations and frees, as a wgpool trace: the workload on which a
//! caching allocator fragments most, because every free stretch is the wrong size for the
//! next request.
//!
//! Sizes are log-uniform from 512 B to 256 MiB, a third of them within 10% of the
//! allocator's borders (1 MiB, 10 MiB, 128 MiB); each block gets a heavy-tailed lifetime,
//! and the live set is kept under a bound. The same seed always gives the same trace.

// Each test binary uses part of this module.
#![allow(dead_code)]

use std::fmt::Write;

use wgpool::rng::SplitMix64;

/// The trace: `allocations` allocations and as many frees, with at most `live_bound` bytes
/// live after each free. Returns the CSV text and the bytes requested in all.
pub fn random_mix(seed: u64, allocations: usize, live_bound: u64) -> (String, u64) {
    const MIB: f64 = (1u64 << 20) as f64;
    let borders = [MIB, 10.0 * MIB, 128.0 * MIB];
    let mut rng = SplitMix64::new(seed);
    let below = |rng: &mut SplitMix64, n: usize| (rng.next_u64() % n as u64) as usize;
    let mut csv = String::from("action,id,size,stream\n");
    // (id, size, lifetime)
    let mut live: Vec<(usize, u64, f64)> = Vec::new();
    let mut live_bytes = 0u64;
    let mut requested = 0u64;
    for id in 1..=allocations {
        let size = if rng.next_f64() < 1.0 / 3.0 {
            borders[below(&mut rng, 3)] * (0.9 + 0.2 * rng.next_f64())
        } else {
            (512f64.ln() + rng.next_f64() * ((256.0 * MIB).ln() - 512f64.ln())).exp()
        } as u64;
        writeln!(csv, "alloc,{id},{size},0").unwrap();
        requested += size;
        live_bytes += size;
        // A Pareto lifetime (shape 1.2): most blocks die young, a few live long.
        live.push((id, size, (1.0 - rng.next_f64()).powf(-1.0 / 1.2)));
        while live_bytes > live_bound || (!live.is_empty() && rng.next_f64() < 0.5) {
            let i = if rng.next_f64() < 0.7 {
                (0..live.len())
                    .min_by(|&a, &b| live[a].2.total_cmp(&live[b].2))
                    .unwrap()
            } else {
                below(&mut rng, live.len())
            };
            let (id, size, _) = live.swap_remove(i);
            live_bytes -= size;
            writeln!(csv, "free,{id},{size},0").unwrap();
        }
    }
    for (id, size, _) in live {
        writeln!(csv, "free,{id},{size},0").unwrap();
    }
    (csv, requested)
}
