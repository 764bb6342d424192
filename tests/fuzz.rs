//! Property-based fuzzing that stays in CI (issue 15): `Config::parse`, every trace reader,
//! the engine under random extreme configurations, and the `wgpool replay` command with and
//! without `--gpu` (issue 25). No input may panic, and every refusal is a clear, short error.
//!
//! Each in-process target runs `WGPOOL_FUZZ_CASES` cases (default 10,000); the command runs
//! a five-hundredth of that without a GPU and as many with `--gpu` (20 runs each by default:
//! about 3 seconds on lavapipe, most of it the engine's timed replays). A longer run by hand:
//! `WGPOOL_FUZZ_CASES=1000000 cargo test --release --test fuzz`.

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, FileFailurePersistence, TestRunner};
use wgpool::config::{Config, OPTIONS};
use wgpool::engine::{AllocError, Engine, EngineLimits, VirtualSegments};
use wgpool::trace::{ReadOptions, read_trace_from};

fn cases() -> u32 {
    std::env::var("WGPOOL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn runner() -> TestRunner {
    runner_of(cases())
}

fn runner_of(cases: u32) -> TestRunner {
    TestRunner::new(RunnerConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..RunnerConfig::default()
    })
}

/// Values that stress parsers: extremes of every numeric type, odd text, lists.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        Just("1".to_string()),
        Just("20".to_string()),
        Just("-1".to_string()),
        Just("18446744073709551615".to_string()),
        Just("18446744073709551616".to_string()),
        Just("9223372036854775807".to_string()),
        Just("137438953472".to_string()),
        Just("17592186044416".to_string()),
        Just("0.5".to_string()),
        Just("1e308".to_string()),
        Just("NaN".to_string()),
        Just("inf".to_string()),
        Just("True".to_string()),
        Just("False".to_string()),
        Just("auto".to_string()),
        Just("".to_string()),
        Just("[]".to_string()),
        Just("[256:1,512:2,>:8]".to_string()),
        Just("[1:0,>:64]".to_string()),
        Just("[".to_string()),
        (0u64..u64::MAX).prop_map(|v| v.to_string()),
        (0u64..4096).prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| v.to_string()),
        "[a-z0-9:\\[\\],>.]{0,12}",
    ]
}

fn key() -> impl Strategy<Value = String> {
    let keys: Vec<String> = OPTIONS.iter().map(|o| o.key.to_string()).collect();
    prop_oneof![
        4 => proptest::sample::select(keys),
        1 => "[a-z_]{0,20}",
    ]
}

/// A configuration string: known and unknown keys with extreme values, sometimes garbled.
fn conf() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => proptest::collection::vec((key(), value()), 0..6).prop_map(|pairs| {
            pairs
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(",")
        }),
        1 => ".{0,60}",
    ]
}

#[test]
fn config_parse_never_panics_and_refuses_clearly() {
    runner()
        .run(&conf(), |text| {
            match Config::parse(&text) {
                Ok(config) => {
                    // What parses renders back to something that parses to the same.
                    let again = Config::parse(&config.to_conf_string())
                        .unwrap_or_else(|e| panic!("`{text}` re-rendered does not parse: {e}"));
                    prop_assert_eq!(again.to_conf_string(), config.to_conf_string());
                }
                Err(e) => {
                    let message = e.to_string();
                    prop_assert!(!message.trim().is_empty());
                    prop_assert!(message.len() < 2000, "{} bytes", message.len());
                }
            }
            Ok(())
        })
        .unwrap();
}

const SNAPSHOT: &[u8] = include_bytes!("data/torch-snapshot-small.pickle");
const CSV: &str =
    "action,id,size,stream\nalloc,1,1000,0\nalloc,2,3145728,1\nfree,1,1000,0\nfree,2,0,1\n";
const RMM: &str = "Thread,Time,Action,Pointer,Size,Stream\n1,1.5,allocate,0x7f00,1000,0x0\n1,1.6,allocate failure,(nil),99,0x0\n1,1.7,free,0x7f00,1000,0x0\n";

/// An input: a valid one of each format with random bytes changed, inserted or cut, or
/// random bytes with a format's first bytes.
fn input() -> impl Strategy<Value = Vec<u8>> {
    let seeds = vec![
        SNAPSHOT.to_vec(),
        CSV.as_bytes().to_vec(),
        RMM.as_bytes().to_vec(),
    ];
    let mutated = (
        proptest::sample::select(seeds),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..8),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(mut bytes, edits, cut)| {
            for (at, byte, kind) in edits {
                let i = at.index(bytes.len().max(1));
                match kind {
                    0 if i < bytes.len() => bytes[i] = byte,
                    1 => bytes.insert(i.min(bytes.len()), byte),
                    _ if i < bytes.len() => {
                        bytes.remove(i);
                    }
                    _ => {}
                }
            }
            let keep = cut.index(bytes.len() + 1).max(bytes.len() / 2);
            bytes.truncate(keep);
            bytes
        });
    let prefixed = (
        proptest::sample::select(vec![
            b"\x80\x04".to_vec(),
            b"\x80\x02}".to_vec(),
            b"Thread,Time,Action,Pointer,Size,Stream\n".to_vec(),
            b"action,id,size,stream\n".to_vec(),
            b"\xEF\xBB\xBF".to_vec(),
        ]),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(mut head, tail)| {
            head.extend(tail);
            head
        });
    prop_oneof![4 => mutated, 1 => prefixed]
}

#[test]
fn every_trace_reader_never_panics_and_names_the_problem() {
    let options = ReadOptions::default().with_max_bytes(1 << 20);
    runner()
        .run(&input(), |bytes| {
            match read_trace_from(&bytes[..], &options) {
                Ok(trace) => prop_assert_eq!(trace.ops.len(), trace.positions.len()),
                Err(e) => {
                    let message = e.to_string();
                    prop_assert!(!message.trim().is_empty());
                    prop_assert!(message.len() < 600, "{} bytes: {message}", message.len());
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Extreme but accepted engine configurations: each option at its bounds.
fn engine_conf() -> impl Strategy<Value = String> {
    let policy = proptest::sample::select(vec!["policy:pytorch", "policy:compact"]);
    let extreme = proptest::collection::vec(
        prop_oneof![
            (20u64..=u64::MAX >> 20).prop_map(|v| format!("max_split_size_mb:{v}")),
            Just("max_split_size_mb:20".to_string()),
            Just("max_split_size_mb:137438953472".to_string()),
            (0u64..=u64::MAX >> 20).prop_map(|v| format!("max_non_split_rounding_mb:{v}")),
            Just("max_non_split_rounding_mb:17592186044386".to_string()),
            prop_oneof![Just(1u32), Just(2), Just(4), Just(64)]
                .prop_map(|v| format!("roundup_power2_divisions:{v}")),
            Just("roundup_power2_divisions:[1:64,>:1]".to_string()),
            (1u64..=u64::MAX >> 20).prop_map(|v| format!("memory_limit_mb:{v}")),
            (1u64..256).prop_map(|v| format!("memory_limit_mb:{v}")),
            (0.01f64..0.99).prop_map(|v| format!("garbage_collection_threshold:{v:.3}")),
            Just("backend:passthrough".to_string()),
        ],
        0..4,
    );
    (policy, extreme).prop_map(|(policy, extra)| {
        let mut parts = vec![policy.to_string()];
        parts.extend(extra);
        parts.join(",")
    })
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(u64),
    Free(prop::sample::Index),
    EmptyCache,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let size = prop_oneof![
        1u64..4096,
        4096u64..(64 << 20),
        Just(1u64 << 20),
        Just((1u64 << 20) + 1),
        Just(10 << 20),
        Just(u64::MAX),
        Just(u64::MAX >> 1),
        Just(1 << 41),
        (0u64..u64::MAX),
    ];
    proptest::collection::vec(
        prop_oneof![
            6 => size.prop_map(Op::Alloc),
            4 => any::<prop::sample::Index>().prop_map(Op::Free),
            1 => Just(Op::EmptyCache),
        ],
        1..40,
    )
}

#[test]
fn the_engine_under_extreme_configurations_never_panics() {
    runner()
        .run(&(engine_conf(), ops()), |(text, ops)| {
            let config = match Config::parse(&text) {
                Ok(config) => config,
                Err(e) => {
                    prop_assert!(!e.to_string().is_empty());
                    return Ok(());
                }
            };
            let mut engine = match Engine::new(config, EngineLimits::unlimited()) {
                Ok(engine) => engine,
                Err(e) => {
                    prop_assert!(!e.to_string().is_empty());
                    return Ok(());
                }
            };
            let mut device = VirtualSegments::with_device_limit(1 << 40);
            let mut live = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc(size) => match engine.allocate(size, 0, &mut device) {
                        Ok(a) => live.push(a.block),
                        Err(AllocError::ZeroSize) => prop_assert_eq!(size, 0),
                        Err(e) => prop_assert!(e.to_string().len() > 20, "{e}"),
                    },
                    Op::Free(i) if !live.is_empty() => {
                        let block = live.swap_remove(i.index(live.len()));
                        engine.free(block, &mut device).unwrap();
                    }
                    Op::Free(_) => {}
                    Op::EmptyCache => engine.empty_cache(&mut device),
                }
            }
            engine
                .check_invariants()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            Ok(())
        })
        .unwrap();
}

/// A configuration for the command: options at and around the device's limits (lavapipe's
/// largest range is 2 GiB less 4 KiB; the modelled H200's 1 TiB), caps, both memory modes,
/// and now and then garbled text.
fn command_conf() -> impl Strategy<Value = String> {
    let policy = proptest::sample::select(vec!["", "policy:pytorch", "policy:compact"]);
    let mode = proptest::sample::select(vec![
        "",
        "expandable_segments:True",
        "expandable_segments:False",
        "expandable_segments:auto",
    ]);
    let extra = proptest::collection::vec(
        prop_oneof![
            proptest::sample::select(vec![
                10u64, 20, 2047, 2048, 2049, 4096, 1_048_576, 1_048_577, 2_097_151
            ])
            .prop_map(|v| format!("large_segment_size_mb:{v}")),
            (10u64..=4096).prop_map(|v| format!("large_segment_size_mb:{v}")),
            (1u64..4096).prop_map(|v| format!("memory_limit_mb:{v}")),
            (0.0f64..=1.0).prop_map(|v| format!("per_process_memory_fraction:{v:.3}")),
            (20u64..=2_097_151).prop_map(|v| format!("max_split_size_mb:{v}")),
            Just("roundup_power2_divisions:[256:1,512:2,>:8]".to_string()),
            (0.01f64..0.99).prop_map(|v| format!("garbage_collection_threshold:{v:.3}")),
            Just("overflow:host".to_string()),
            Just("backend:passthrough".to_string()),
            (0.0f64..=100.0).prop_map(|v| format!("compact_recycle_rate:{v:.2}")),
        ],
        0..3,
    );
    prop_oneof![
        8 => (policy, mode, extra).prop_map(|(policy, mode, extra)| {
            let mut parts: Vec<String> = [policy, mode]
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect();
            parts.extend(extra);
            parts.join(",")
        }),
        1 => conf(),
    ]
}

/// A small trace for the command: sizes at the device's limits and beyond, frees of live
/// blocks (now and then of a block that is not live), refused requests, and now and then
/// byte-order marks or a header.
fn command_trace() -> impl Strategy<Value = String> {
    // Mostly sizes up to 2 GiB (log-uniform), so that about half the traces replay whole.
    let size = prop_oneof![
        12 => (0u32..=31).prop_flat_map(|bits| 0u64..=(1 << bits)),
        1 => proptest::sample::select(vec![(1u64 << 31) - 1, 1 << 31, 1 << 32]),
        1 => proptest::sample::select(vec![1u64 << 40, (1 << 41) + 1, u64::MAX]),
    ];
    // (action, size, which live block): 0 and 1 allocate, 2 frees, 3 is refused.
    let op = (0u8..4, size, any::<prop::sample::Index>());
    let head = prop_oneof![
        6 => Just(""),
        2 => Just("action,id,size,stream\n"),
        1 => Just("\u{feff}"),
        1 => Just("\u{feff}\u{feff}"),
    ];
    let stale_free = proptest::bool::weighted(0.05);
    (head, proptest::collection::vec(op, 1..10), stale_free).prop_map(|(head, ops, stale)| {
        let mut rows = Vec::new();
        let mut live: Vec<u32> = Vec::new();
        for (id, (action, size, which)) in (1u32..).zip(ops) {
            match action {
                2 if !live.is_empty() => {
                    let id = live.swap_remove(which.index(live.len()));
                    rows.push(format!("free,{id},0,0"));
                }
                3 => rows.push(format!("oom,{id},{size},0")),
                _ => {
                    rows.push(format!("alloc,{id},{size},0"));
                    live.push(id);
                }
            }
        }
        if stale {
            rows.push("free,999,0,0".to_string());
        }
        format!("{head}{}\n", rows.join("\n"))
    })
}

/// Runs `wgpool replay` on `trace` under `conf` with `extra` and checks the exit-code
/// contract: 0, or 2 with a short message that is neither a panic nor an internal error of
/// the memory layer; never 1 (internal failures), never a signal.
fn check_command(trace: &str, conf: &str, extra: &[&str]) -> Result<(), TestCaseError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "wgpool-fuzz-{}-{}.csv",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, trace).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .arg("replay")
        .arg(&path)
        // An argument cannot hold a NUL byte.
        .arg("--json")
        .arg(format!("--conf={}", conf.replace('\0', " ")))
        .args(extra)
        .env_remove("WGPOOL_CONF")
        .output()
        .expect("the wgpool binary runs");
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let what = format!("replay {extra:?} --conf {conf:?} of {trace:?}");
    match output.status.code() {
        Some(0) => {
            let report: Result<serde_json::Value, _> = serde_json::from_slice(&output.stdout);
            prop_assert!(
                report.is_ok_and(|r| r.is_object()),
                "{what}: stdout is not one JSON object"
            );
        }
        Some(2) => {
            prop_assert!(stderr.starts_with("wgpool: "), "{what}: {stderr}");
            prop_assert!(stderr.len() < 3000, "{what}: {} bytes", stderr.len());
            for internal in [
                "panicked",
                "invalid page operation",
                "segment source failed",
            ] {
                prop_assert!(!stderr.contains(internal), "{what}: {stderr}");
            }
        }
        other => prop_assert!(false, "{what}: exit {other:?}: {stderr}"),
    }
    Ok(())
}

/// Runs of the command per target: each is a process.
fn command_cases() -> u32 {
    (cases() / 500).max(1)
}

#[test]
fn the_replay_command_exits_0_or_2() {
    runner_of(command_cases())
        .run(&(command_trace(), command_conf()), |(trace, conf)| {
            check_command(&trace, &conf, &[])
        })
        .unwrap();
}

/// The same through a real pool on the test adapter (lavapipe in CI), at scale 1 (sizes at
/// the device's limits) or divided down.
#[test]
fn the_replay_command_on_the_gpu_exits_0_or_2() {
    let scale = proptest::sample::select(vec!["1", "1", "64"]);
    runner_of(command_cases())
        .run(
            &(command_trace(), command_conf(), scale),
            |(trace, conf, scale)| check_command(&trace, &conf, &["--gpu", "--scale", scale]),
        )
        .unwrap();
}
