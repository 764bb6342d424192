//! Property-based fuzzing that stays in CI (issue 15): `Config::parse`, every trace reader,
//! and the engine under random extreme configurations. No input may panic, and every refusal
//! is a clear, short error.
//!
//! Each target runs `WGPOOL_FUZZ_CASES` cases (default 10,000). A longer run by hand:
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
    TestRunner::new(RunnerConfig {
        cases: cases(),
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
            engine.check_invariants().map_err(TestCaseError::fail)?;
            Ok(())
        })
        .unwrap();
}
