//! Internal, with no stability promise: a small deterministic random generator (SplitMix64)
//! for benchmark and test data. It sits at the bottom of the crate, beside `format`, so that
//! tests and benchmarks reach it without the `cli` feature; `bench::rng` re-exports it.

/// SplitMix64 (Steele, Lea, Flood): 64 bits of state, passes BigCrush, and any seed is fine.
/// Not for cryptography.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A float uniformly distributed in `[0, 1)`, with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A float uniformly distributed in `[-1, 1)`, with 24 random bits.
    pub fn next_unit_f32(&mut self) -> f32 {
        let bits = (self.next_u64() >> 40) as u32; // 24 bits
        bits as f32 * (2.0 / 16_777_216.0) - 1.0
    }
}
