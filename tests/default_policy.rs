//! The default policy's promise: it holds less memory than any of PyTorch's configurations,
//! on steady workloads (the GPT-2 training trace) and on random mixes, where fixed segments
//! and PyTorch's expandable segments both fragment.

#[path = "common/random_mix.rs"]
mod random_mix;

use std::path::Path;

use wgpool::config::Config;
use wgpool::trace::{ReplayOptions, ReplayReport, parse_trace, replay};

/// An H200's memory, so that pages mode sizes its chunks and ranges as on the GPU.
const H200: u64 = 150_109_880_320;
const GIB: u64 = 1 << 30;

fn run(csv: &str, conf: &str) -> ReplayReport {
    let trace = parse_trace(csv).expect("the trace parses");
    let options = ReplayOptions::default()
        .with_device_memory(Some(H200))
        .with_min_timed_runs(1);
    replay(&trace, &Config::parse(conf).unwrap(), &options)
        .unwrap_or_else(|e| panic!("replay under `{conf}`: {e}"))
}

/// PyTorch's own allocator, with and without expandable segments, and the default policy on
/// fixed segments (what a device without sparse binding gets).
const OTHERS: [&str; 3] = [
    "policy:pytorch",
    "policy:pytorch,expandable_segments:True",
    "expandable_segments:False",
];

/// Asserts that `ours` (the replay under `our_conf`) held strictly less at its peak than
/// `other` (under `other_conf`), on the same live memory.
fn assert_holds_less(
    name: &str,
    (ours, our_conf): (&ReplayReport, &str),
    other_conf: &str,
    other: &ReplayReport,
) {
    assert_eq!(other.peak_live_bytes, ours.peak_live_bytes, "{name}");
    assert!(
        ours.peak_reserved_bytes < other.peak_reserved_bytes,
        "{name}: `{our_conf}` holds {} B ({:.4} of live), `{other_conf}` {} B ({:.4})",
        ours.peak_reserved_bytes,
        ours.ratio,
        other.peak_reserved_bytes,
        other.ratio
    );
}

fn assert_default_holds_least(csv: &str, name: &str) -> ReplayReport {
    let default = run(csv, "");
    assert_eq!(default.mode, "pages", "{name}: {default:?}");
    assert_eq!(default.num_ooms, 0, "{name}: {default:?}");
    for conf in OTHERS {
        assert_holds_less(name, (&default, "the default"), conf, &run(csv, conf));
    }
    default
}

#[test]
fn the_default_holds_less_than_pytorch_on_the_gpt2_trace() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-train.csv");
    let csv = std::fs::read_to_string(&path).unwrap();
    let default = assert_default_holds_least(&csv, "gpt2-train");
    // Within page rounding of live memory.
    assert!(default.ratio < 1.002, "{default:?}");
}

#[test]
fn the_default_holds_less_than_pytorch_on_random_mixes() {
    // 30,000 allocations each: long enough that a recycling budget fixed at the start
    // runs out (the default before `compact_recycle_rate` held 1.48 times live memory on the
    // first, more than PyTorch's expandable segments at 1.38).
    for seed in 1..=3 {
        let (csv, _) = random_mix::random_mix(seed, 30_000, 2 * GIB);
        let default = assert_default_holds_least(&csv, &format!("random mix {seed}"));
        // PyTorch's configurations hold 29 to 68% more than live memory here; the default
        // stays within page rounding of it.
        assert!(default.ratio < 1.02, "random mix {seed}: {default:?}");
    }
}

/// On a device without sparse binding the default places blocks in fixed segments; there it
/// must still hold less than PyTorch's native allocator (which has fixed segments too).
fn assert_segments_default_holds_less_than_pytorch(csv: &str, name: &str) -> ReplayReport {
    let conf = "expandable_segments:False";
    let segments = run(csv, conf);
    assert_eq!(segments.mode, "segments", "{name}: {segments:?}");
    let pytorch = "policy:pytorch";
    assert_holds_less(name, (&segments, conf), pytorch, &run(csv, pytorch));
    segments
}

#[test]
fn on_fixed_segments_the_default_holds_less_than_pytorch() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-train.csv");
    let csv = std::fs::read_to_string(&path).unwrap();
    assert_segments_default_holds_less_than_pytorch(&csv, "gpt2-train");
    for seed in 1..=3 {
        let (csv, _) = random_mix::random_mix(seed, 30_000, 2 * GIB);
        let name = format!("random mix {seed}");
        let segments = assert_segments_default_holds_less_than_pytorch(&csv, &name);
        // Segments released and created again to stay near the peak are bounded by the
        // release budget: 0.25 times the allocated peak plus `compact_recycle_rate` (0.1)
        // times every byte requested.
        assert!(segments.segments_released > 0, "{name}: {segments:?}");
    }
}
