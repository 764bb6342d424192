//! The engine's unit tests' source of pseudo-random numbers: xorshift64, so that every run
//! draws the same sequence from the same seed and a failure repeats.

/// A generator of xorshift64 numbers from `seed` (not zero).
pub(super) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
