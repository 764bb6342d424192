//! Growth by concatenation, told from misses: whether a workload's requests keep growing a
//! little at a time, as a KV cache concatenated one token per step does.
//!
//! The page policy earns its recycling slack as it remaps (`compact_slack_ramp`), which
//! keeps training near its peak but makes a decode remap for most of its first run: its
//! live set grows with every step, so the bytes it maps stay near its peak while it
//! recycles. A decode shows itself differently: most of its misses (requests the free
//! blocks cannot serve) are a little larger than one shortly before. This signal counts
//! such misses and says how much of the slack that evidence earns.
//!
//! Guarantees: [`GrowthSignal::earned`] is within 0 to 1 and never falls; it is 0 until
//! growth misses are more than an eighth of all misses plus 2, and it grows only with growth
//! misses, so a workload with none (sizes that repeat or shrink) earns nothing.

/// How many of the latest misses are remembered.
const MEMORY: usize = 8;
/// A miss at most 1/`BAND` larger than a remembered one is growth.
const BAND: u64 = 64;
/// Growth misses up to 1/`SHARE` of all misses earn nothing.
const SHARE: f64 = 8.0;
/// Growth misses beyond that share that earn nothing yet: a few are chance.
const CHANCE: f64 = 2.0;
/// Growth misses beyond those at which the slack is earned in full. Few, so that a decode
/// earns it in its first steps: the layout a tight start leaves can keep a decode
/// remapping after the slack is earned (the test decode of `tests/config_options` mapped
/// 1.9x to 2.1x its peak over its run with 12 to 32 here, 1.07x with 8).
const FULL: f64 = 8.0;

/// The misses a policy has seen, as evidence of growth by concatenation.
#[derive(Debug, Default)]
pub(crate) struct GrowthSignal {
    recent: [u64; MEMORY],
    next: usize,
    misses: u64,
    growth: u64,
    /// The most the evidence has earned so far: earned slack is kept.
    earned: f64,
}

impl GrowthSignal {
    /// Notes a miss of `rounded` bytes.
    pub fn miss(&mut self, rounded: u64) {
        if self
            .recent
            .iter()
            .any(|&seen| seen < rounded && rounded - seen <= seen / BAND)
        {
            self.growth += 1;
        }
        self.misses += 1;
        self.recent[self.next] = rounded;
        self.next = (self.next + 1) % MEMORY;
        let now = (self.growth as f64 - self.misses as f64 / SHARE - CHANCE) / FULL;
        self.earned = self.earned.max(now.min(1.0));
    }

    /// The share of the slack the misses so far have earned, from 0 to 1; it never falls.
    pub fn earned(&self) -> f64 {
        self.earned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concatenation_earns_the_slack_and_repeats_do_not() {
        // A K and a V cache per step that miss, one token (4 KiB) longer each step.
        let mut decode = GrowthSignal::default();
        let mut steps = 0;
        while decode.earned() < 1.0 {
            let size = (1 << 20) + steps * 4096;
            decode.miss(size);
            decode.miss(size);
            steps += 1;
            assert!(steps <= 16, "a decode did not earn the slack in 16 steps");
        }
        // Not before the evidence: at least the chance misses and the full count grew.
        assert!(decode.growth as f64 >= CHANCE + FULL, "{decode:?}");
        // A training step's sizes, again and again, then shrinking sizes: no growth.
        let mut training = GrowthSignal::default();
        for _ in 0..100 {
            for size in [4 << 20, 1 << 20, 3 << 20, 8 << 20] {
                training.miss(size);
            }
        }
        for size in (1..1000u64).rev() {
            training.miss(size * 4096);
        }
        assert_eq!(training.earned(), 0.0);
    }

    #[test]
    fn rare_growth_among_many_misses_earns_nothing() {
        // Sizes that step up by a tenth (beyond the band) through a cycle of 40, and every
        // 16th miss 512 B above the one before it: growth one miss in 16.
        let mut mixed = GrowthSignal::default();
        let mut previous = 1u64 << 20;
        for i in 0..2000u64 {
            let size = if i % 16 == 1 {
                previous + 512
            } else {
                (0..i % 40).fold(1u64 << 20, |s, _| s + s / 10)
            };
            mixed.miss(size);
            previous = size;
            assert_eq!(mixed.earned(), 0.0, "miss {i}");
        }
        assert!(mixed.growth > 0, "the growth misses were not seen");
    }

    #[test]
    fn growth_far_above_the_band_is_not_growth() {
        let mut jumps = GrowthSignal::default();
        let mut size = 1u64 << 20;
        for _ in 0..200 {
            size += size / 32;
            jumps.miss(size);
        }
        assert_eq!(jumps.earned(), 0.0);
    }
}
