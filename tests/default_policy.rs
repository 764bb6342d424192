//! The default policy's promise: it holds less memory than any of PyTorch's configurations,
//! on steady workloads (the GPT-2 training trace) and on random mixes, where fixed segments
//! and PyTorch's expandable segments both fragment; and a long training loop (many passes of
//! a trace) stays within the 1% bar on peak reserved.

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

/// `csv` (a wgpool CSV trace) replayed `passes` times in a row, as a training loop runs the
/// same steps again and again with the pool's cache kept: each pass's ids are moved to their
/// own range, and what a pass leaves allocated is freed at its end.
fn repeated(csv: &str, passes: u64) -> String {
    let mut lines = csv.lines();
    let header = lines.next().expect("a header");
    let rows: Vec<Vec<&str>> = lines.map(|line| line.split(',').collect()).collect();
    let mut left = Vec::new();
    for row in &rows {
        match row[0] {
            "alloc" => left.push(row.clone()),
            "free" => left.retain(|kept: &Vec<&str>| kept[1] != row[1]),
            other => panic!("the test trace has a `{other}` row"),
        }
    }
    let mut out = format!("{header}\n");
    for pass in 0..passes {
        let moved = |row: &Vec<&str>, action: &str| {
            let id: u64 = row[1].parse().expect("a numeric id");
            let mut fields = vec![action.to_string(), (id + (pass << 50)).to_string()];
            fields.extend(row[2..].iter().map(|field| field.to_string()));
            fields.join(",") + "\n"
        };
        for row in &rows {
            out += &moved(row, row[0]);
        }
        for row in &left {
            out += &moved(row, "free");
        }
    }
    out
}

/// The report of `csv` replayed `passes` times in a row (`ReplayOptions::passes`).
fn run_passes(csv: &str, passes: u32) -> ReplayReport {
    let trace = parse_trace(csv).expect("the trace parses");
    let options = ReplayOptions::default()
        .with_device_memory(Some(H200))
        .with_min_timed_runs(1)
        .with_passes(passes);
    replay(&trace, &Config::default(), &options).expect("the loop replays")
}

#[test]
fn passes_replay_the_loop_that_the_repeated_trace_spells_out() {
    // Five passes of GPT-2 through `ReplayOptions::passes`, and the same loop written out
    // as one trace (ids moved, what a pass leaves freed at its end): the engine must do the
    // same work.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-train.csv");
    let csv = std::fs::read_to_string(&path).unwrap();
    let looped = run_passes(&csv, 5);
    let spelled = run(&repeated(&csv, 5), "");
    let one = run(&csv, "");
    assert_eq!((looped.passes, looped.ops), (5, 5 * one.ops));
    let figures = |r: &ReplayReport| {
        (
            r.peak_live_bytes,
            r.peak_reserved_bytes,
            r.segments_created,
            r.segments_released,
            r.mapped_bytes_total,
            r.unmapped_bytes_total,
            r.bind_calls,
            r.final_reserved_bytes,
        )
    };
    assert_eq!(figures(&looped), figures(&spelled));
    // More passes remap more than one: the loop is not one pass counted five times.
    assert!(
        looped.mapped_bytes_total > one.mapped_bytes_total,
        "{looped:?}"
    );
}

#[test]
fn a_long_training_run_stays_within_one_percent_of_live_memory() {
    // Thirty passes of the GPT-2 trace (eight training steps each) with the cache kept. The
    // recycling budget grows with every byte requested, so the default keeps remapping to
    // stay near the peak as the loop goes on (about 1.2% of the peak a pass here, at the
    // trace's peak, where a third logits buffer needs room that the scattered free pages
    // cannot give); what it must not do is let the slack that remapping earns creep past
    // the bar on peak reserved.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-train.csv");
    let csv = std::fs::read_to_string(&path).unwrap();
    let one = run(&csv, "");
    let long = run_passes(&csv, 30);
    assert_eq!(long.mode, "pages", "{long:?}");
    assert_eq!(
        long.peak_live_bytes, one.peak_live_bytes,
        "the passes repeat exactly"
    );
    assert!(long.ratio < 1.01, "after 30 passes: {long:?}");
    assert!(
        long.ratio >= one.ratio,
        "one pass {one:?}, 30 passes {long:?}"
    );
}
