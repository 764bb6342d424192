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

/// A small deterministic generator (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The trace: `allocations` allocations and as many frees, with at most `live_bound` bytes
/// live after each free. Returns the CSV text and the bytes requested in all.
pub fn random_mix(seed: u64, allocations: usize, live_bound: u64) -> (String, u64) {
    const MIB: f64 = (1u64 << 20) as f64;
    let borders = [MIB, 10.0 * MIB, 128.0 * MIB];
    let mut rng = Rng::new(seed);
    let mut csv = String::from("action,id,size,stream\n");
    // (id, size, lifetime)
    let mut live: Vec<(usize, u64, f64)> = Vec::new();
    let mut live_bytes = 0u64;
    let mut requested = 0u64;
    for id in 1..=allocations {
        let size = if rng.unit() < 1.0 / 3.0 {
            borders[rng.below(3)] * (0.9 + 0.2 * rng.unit())
        } else {
            (512f64.ln() + rng.unit() * ((256.0 * MIB).ln() - 512f64.ln())).exp()
        } as u64;
        writeln!(csv, "alloc,{id},{size},0").unwrap();
        requested += size;
        live_bytes += size;
        // A Pareto lifetime (shape 1.2): most blocks die young, a few live long.
        live.push((id, size, (1.0 - rng.unit()).powf(-1.0 / 1.2)));
        while live_bytes > live_bound || (!live.is_empty() && rng.unit() < 0.5) {
            let i = if rng.unit() < 0.7 {
                (0..live.len())
                    .min_by(|&a, &b| live[a].2.total_cmp(&live[b].2))
                    .unwrap()
            } else {
                rng.below(live.len())
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
