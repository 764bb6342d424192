//! What the random tests generate: the operations of a sequence, and the engines they run
//! on (configurations and simulated devices, for segments mode and for pages mode); and the
//! options a generated configuration sets.

use std::collections::BTreeSet;

use proptest::prelude::*;

use wgpool::config::{Config, OPTIONS};

use crate::{GIB, KIB, MIB};

/// One operation on the engine.
#[derive(Debug, Clone)]
pub enum Op {
    /// Allocate; on out-of-memory with `recover`, free everything, `empty_cache` and retry.
    Alloc {
        size: u64,
        stream: u32,
        recover: bool,
    },
    /// Free the live block at `pick % live`.
    Free {
        pick: usize,
    },
    /// Free up to `count` live blocks.
    FreeBurst {
        count: usize,
    },
    /// Free an id that was already freed.
    FreeStale {
        pick: usize,
    },
    /// Ask for zero bytes.
    ZeroAlloc,
    /// Report the live block at `pick % live` as freed and handed straight back to a
    /// request of its size (`Engine::record_reuse`, the pool's reuse cache).
    RecordReuse {
        pick: usize,
    },
    EmptyCache,
    ResetPeak,
}

/// 1 B to 1 GiB, log-uniform: as many sizes under 1 KiB as between 1 MiB and 1 GiB.
fn log_uniform_size() -> impl Strategy<Value = u64> {
    (0.0f64..=30.0).prop_map(|e| (2f64.powf(e) as u64).clamp(1, GIB))
}

/// Sizes at the rule boundaries (512 B granule, the 1 MiB pool limit, the 10 MiB segment
/// rule, common max_split_size values), so that exact reuse and edge cases happen often.
fn boundary_size() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![
        1,
        511,
        512,
        513,
        1000,
        2048,
        MIB - 1,
        MIB,
        MIB + 1,
        2 * MIB,
        2500 * KIB,
        10 * MIB - 1,
        10 * MIB,
        10 * MIB + 1,
        20 * MIB,
        20 * MIB + 1,
        40 * MIB,
        100 * MIB,
        110 * MIB,
        128 * MIB,
        256 * MIB + 1,
        GIB,
    ])
}

fn size_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![4 => log_uniform_size(), 1 => boundary_size()]
}

/// One operation of a random sequence, in the proportions the tests have always used.
pub fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        550 => (size_strategy(), 0u32..3, prop::bool::weighted(0.3))
            .prop_map(|(size, stream, recover)| Op::Alloc { size, stream, recover }),
        380 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (1usize..100).prop_map(|count| Op::FreeBurst { count }),
        20 => any::<usize>().prop_map(|pick| Op::FreeStale { pick }),
        10 => Just(Op::ZeroAlloc),
        10 => any::<usize>().prop_map(|pick| Op::RecordReuse { pick }),
        25 => Just(Op::EmptyCache),
        10 => Just(Op::ResetPeak),
    ]
}

/// A list-form `roundup_power2_divisions` value: 1 to 4 increasing power-of-two keys from
/// 1 MiB to 2 GiB, power-of-two divisions, and sometimes a `>` entry.
pub fn roundup_list() -> impl Strategy<Value = String> {
    (
        prop::collection::btree_map(0u32..=11, 0u32..=4, 1..=4),
        prop::option::of(0u32..=4),
    )
        .prop_map(|(entries, rest)| {
            let mut parts: Vec<String> = entries
                .iter()
                .map(|(k, d)| format!("{}:{}", 1u64 << k, 1u32 << d))
                .collect();
            if let Some(r) = rest {
                parts.push(format!(">:{}", 1u32 << r));
            }
            format!("[{}]", parts.join(","))
        })
}

/// Formats an option value as `key:value`.
pub fn keyed<T: std::fmt::Display>(key: &'static str) -> impl Fn(Option<T>) -> Option<String> {
    move |v| v.map(|v| format!("{key}:{v}"))
}

/// One operation as a recorded case writes it (`alloc SIZE STREAM RECOVER`, `free PICK`,
/// `free_burst COUNT`, `free_stale PICK`, `record_reuse PICK`, `zero_alloc`, `empty_cache`,
/// `reset_peak`).
pub fn parse_op(line: &str) -> Op {
    let f: Vec<&str> = line.split_whitespace().collect();
    let n = |i: usize| f[i].parse::<u64>().unwrap();
    match f[0] {
        "alloc" => Op::Alloc {
            size: n(1),
            stream: n(2) as u32,
            recover: f[3] == "true",
        },
        "free" => Op::Free {
            pick: n(1) as usize,
        },
        "free_burst" => Op::FreeBurst {
            count: n(1) as usize,
        },
        "free_stale" => Op::FreeStale {
            pick: n(1) as usize,
        },
        "record_reuse" => Op::RecordReuse {
            pick: n(1) as usize,
        },
        "zero_alloc" => Op::ZeroAlloc,
        "empty_cache" => Op::EmptyCache,
        "reset_peak" => Op::ResetPeak,
        other => panic!("unknown op {other}"),
    }
}

/// Checks that `conf` parses and adds the keys it sets to `seen`.
pub fn note_options(conf: &str, seen: &mut BTreeSet<String>) {
    Config::parse(conf).unwrap();
    for entry in conf.split(',') {
        seen.insert(entry.split(':').next().unwrap().to_string());
    }
}

/// Every option of the configuration table is among `seen`.
pub fn assert_every_option(seen: &BTreeSet<String>, what: &str) {
    for option in OPTIONS {
        assert!(seen.contains(option.key), "no {what} sets `{}`", option.key);
    }
}

// ---------------------------------------------------------------------------------------
// Segments mode
// ---------------------------------------------------------------------------------------

/// wgpu's `max_buffer_size` on the H200 (a multiple of 512).
const H200_MAX_BUFFER: u64 = 4_292_870_144;

/// Everything about one engine besides the operations.
#[derive(Debug, Clone)]
pub struct SegmentSetup {
    /// The `WGPOOL_CONF` string (keys in random order).
    pub conf: String,
    /// `EngineLimits::device_memory`.
    pub device_memory: Option<u64>,
    /// `VirtualSegments::with_device_limit`, if any.
    pub device_limit: Option<u64>,
    /// `EngineLimits::max_segment_size`.
    pub max_segment_size: u64,
}

/// The policies a random configuration may name.
#[derive(Debug, Clone, Copy)]
pub enum PolicyChoice {
    Pytorch,
    Default,
    Any,
}

/// The kind of configuration a random test draws.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub policy: PolicyChoice,
    /// Always run under a cap or a device limit.
    pub limited: bool,
}

/// Configurations of fixed segments of one shape, mixing every option, with simulated
/// device sizes, device limits and segment size limits.
pub fn setup_strategy(shape: Shape) -> impl Strategy<Value = SegmentSetup> {
    let policy = match shape.policy {
        PolicyChoice::Pytorch => Just(Some("policy:pytorch".to_string())).boxed(),
        PolicyChoice::Default => {
            prop_oneof![Just(None), Just(Some("policy:compact".to_string()))].boxed()
        }
        PolicyChoice::Any => prop_oneof![
            Just(None),
            Just(Some("policy:pytorch".to_string())),
            Just(Some("policy:compact".to_string()))
        ]
        .boxed(),
    };
    let (limit_p, fraction_p, device_limit_p) = if shape.limited {
        (0.6, 0.35, 0.5)
    } else {
        (0.3, 0.2, 0.2)
    };
    let options = (
        policy,
        prop::option::weighted(0.4, prop_oneof![Just(20u64), Just(128u64), 20u64..=512])
            .prop_map(keyed("max_split_size_mb")),
        prop::option::weighted(0.3, 1u64..=64).prop_map(keyed("max_non_split_rounding_mb")),
        prop::option::weighted(
            0.4,
            prop_oneof![
                (0u32..=4).prop_map(|e| (1u32 << e).to_string()),
                roundup_list()
            ],
        )
        .prop_map(keyed("roundup_power2_divisions")),
        prop::option::weighted(0.25, 1u64..=256).prop_map(keyed("roundup_bypass_threshold_mb")),
        prop::option::weighted(0.35, 0.05f64..0.99).prop_map(keyed("garbage_collection_threshold")),
        prop::option::weighted(limit_p, prop_oneof![64u64..=1024, 1024u64..=16384])
            .prop_map(keyed("memory_limit_mb")),
        prop::option::weighted(fraction_p, 0.02f64..=1.0)
            .prop_map(keyed("per_process_memory_fraction")),
        prop::option::weighted(0.3, 10u64..=128).prop_map(keyed("large_segment_size_mb")),
        prop_oneof![
            4 => Just(None),
            1 => Just(Some("backend:native".to_string())),
            1 => Just(Some("backend:passthrough".to_string())),
        ],
        prop::option::weighted(0.1, Just("False")).prop_map(keyed("expandable_segments")),
        prop::option::weighted(0.1, prop_oneof![Just("none"), Just("host")])
            .prop_map(keyed("overflow")),
    );
    let compact_knobs = (
        prop::option::weighted(0.3, 0.0f64..=1.0).prop_map(keyed("compact_min_share")),
        prop::option::weighted(0.3, prop_oneof![0.0f64..0.2, 0.0f64..=10.0])
            .prop_map(keyed("compact_reserved_slack")),
        prop::option::weighted(0.3, prop_oneof![0.0f64..=1.0, 0.0f64..=1000.0])
            .prop_map(keyed("compact_release_budget")),
        prop::option::weighted(0.2, 0.0f64..=100.0).prop_map(keyed("compact_recycle_rate")),
        prop::option::weighted(0.2, 0.0f64..=1.0).prop_map(keyed("compact_page_slack")),
        prop::option::weighted(0.2, 0.0f64..=10.0).prop_map(keyed("compact_slack_ramp")),
        prop::option::weighted(0.1, 0u32..=8).prop_map(keyed("page_reserve_chunks")),
        prop::option::weighted(0.2, any::<bool>()).prop_map(keyed("compact_slack_on_growth")),
        prop::option::weighted(0.1, 1u32..=256).prop_map(keyed("page_bind_batch")),
        prop::option::weighted(0.2, any::<bool>()).prop_map(keyed("compact_share_idle")),
        prop::option::weighted(0.2, prop_oneof![0u32..=64, 0u32..=65536])
            .prop_map(keyed("compact_small_map_kb")),
        // A GPU pool's: the engine accepts it and places the same.
        prop::option::weighted(0.1, prop_oneof![Just("auto"), Just("True"), Just("False")])
            .prop_map(keyed("reuse_cache")),
    );
    let limits = (
        prop::option::weighted(0.85, (1u64..=32).prop_map(|g| g * GIB)),
        prop::option::weighted(device_limit_p, (256u64..=16384).prop_map(|m| m * MIB)),
        prop_oneof![6 => Just(u64::MAX / 4), 1 => Just(H200_MAX_BUFFER), 1 => Just(512 * MIB)],
        64u64..=4096,
    );
    (options, compact_knobs, limits).prop_flat_map(move |(o, k, l)| {
        let (device_memory, mut device_limit, max_segment_size, fallback_mb) = l;
        let parts: Vec<String> = [
            o.0, o.1, o.2, o.3, o.4, o.5, o.6, o.7, o.8, o.9, o.10, o.11, k.0, k.1, k.2, k.3, k.4,
            k.5, k.6, k.7, k.8, k.9, k.10, k.11,
        ]
        .into_iter()
        .flatten()
        .collect();
        let has_cap = parts
            .iter()
            .any(|p| p.starts_with("memory_limit_mb") || p.starts_with("per_process"));
        if shape.limited && !has_cap && device_limit.is_none() {
            device_limit = Some(fallback_mb * MIB);
        }
        Just(parts)
            .prop_shuffle()
            .prop_map(move |parts| SegmentSetup {
                conf: parts.join(","),
                device_memory,
                device_limit,
                max_segment_size,
            })
    })
}

// ---------------------------------------------------------------------------------------
// Pages mode
// ---------------------------------------------------------------------------------------

/// One engine in pages mode: its configuration, and the simulated device.
#[derive(Debug, Clone)]
pub struct PageSetup {
    pub conf: String,
    /// Small pages and short ranges (lavapipe: 4 KiB pages; ranges of 256 MiB here, so that
    /// requests need several), else an H200's 64 KiB pages and 1 TiB ranges.
    pub small_device: bool,
    /// `EngineLimits::device_memory`: the base of `per_process_memory_fraction`, and what
    /// sizes new ranges (9/8 of it).
    pub device_memory: Option<u64>,
    /// `VirtualSegments::with_device_limit`, if any.
    pub device_limit: Option<u64>,
}

/// Configurations that map pages, mixing every option that pages mode accepts
/// (`backend:passthrough` and `expandable_segments:False` give fixed segments).
pub fn page_setup_strategy(limited: bool) -> impl Strategy<Value = PageSetup> {
    let policy = prop::sample::select(vec![
        "",
        "expandable_segments:True",
        "expandable_segments:auto",
        "policy:compact,expandable_segments:True",
        "policy:pytorch,expandable_segments:True",
        "policy:pytorch,expandable_segments:auto",
    ]);
    // Caps only where out-of-memory is expected.
    let cap = |p: f64, strategy: BoxedStrategy<String>| {
        if limited {
            prop::option::weighted(p, strategy).boxed()
        } else {
            Just(None).boxed()
        }
    };
    let options = (
        policy,
        prop::option::weighted(0.2, prop_oneof![Just(20u64), Just(128), 20u64..=512])
            .prop_map(keyed("max_split_size_mb")),
        prop::option::weighted(0.15, 1u64..=64).prop_map(keyed("max_non_split_rounding_mb")),
        prop::option::weighted(
            0.25,
            prop_oneof![
                (1u32..=3).prop_map(|e| (1u32 << e).to_string()),
                roundup_list()
            ],
        )
        .prop_map(keyed("roundup_power2_divisions")),
        prop::option::weighted(0.1, 1u64..=256).prop_map(keyed("roundup_bypass_threshold_mb")),
        prop::option::weighted(0.2, prop_oneof![0.8f64..0.81, 0.05f64..0.99])
            .prop_map(keyed("garbage_collection_threshold")),
        cap(
            0.7,
            (64u64..4096)
                .prop_map(|v| format!("memory_limit_mb:{v}"))
                .boxed(),
        ),
        cap(
            0.3,
            (0.02f64..=1.0)
                .prop_map(|v| format!("per_process_memory_fraction:{v}"))
                .boxed(),
        ),
        // Up to four times the small device's largest range (256 MiB): a large page above
        // it is clamped to it (issue 25).
        prop::option::weighted(0.2, prop_oneof![4 => 10u64..=128, 1 => 200u64..=1024])
            .prop_map(keyed("large_segment_size_mb")),
        prop::option::weighted(0.1, Just("native")).prop_map(keyed("backend")),
        prop::option::weighted(0.1, prop_oneof![Just("none"), Just("host")])
            .prop_map(keyed("overflow")),
    );
    let compact_knobs = (
        prop::option::weighted(0.1, 0.0f64..=1.0).prop_map(keyed("compact_min_share")),
        prop::option::weighted(0.1, 0.0f64..=10.0).prop_map(keyed("compact_reserved_slack")),
        prop::option::weighted(0.1, 0.0f64..=1000.0).prop_map(keyed("compact_release_budget")),
        prop::option::weighted(0.3, prop_oneof![0.0f64..=0.2, 0.0f64..=100.0])
            .prop_map(keyed("compact_recycle_rate")),
        prop::option::weighted(0.3, prop_oneof![0.0f64..=0.02, 0.0f64..=1.0])
            .prop_map(keyed("compact_page_slack")),
        prop::option::weighted(0.3, prop_oneof![0.0f64..=0.05, 0.0f64..=10.0])
            .prop_map(keyed("compact_slack_ramp")),
        prop::option::weighted(0.1, 0u32..=8).prop_map(keyed("page_reserve_chunks")),
        prop::option::weighted(0.2, any::<bool>()).prop_map(keyed("compact_slack_on_growth")),
        prop::option::weighted(0.1, 1u32..=256).prop_map(keyed("page_bind_batch")),
        prop::option::weighted(0.2, any::<bool>()).prop_map(keyed("compact_share_idle")),
        prop::option::weighted(0.2, prop_oneof![0u32..=64, 0u32..=65536])
            .prop_map(keyed("compact_small_map_kb")),
        // A GPU pool's: the engine accepts it and places the same.
        prop::option::weighted(0.1, prop_oneof![Just("auto"), Just("True"), Just("False")])
            .prop_map(keyed("reuse_cache")),
    );
    let device = (
        any::<bool>(),
        prop::option::weighted(0.5, (1u64..=32).prop_map(|g| g * GIB)),
        if limited {
            prop::option::weighted(0.5, (96u64..6000).prop_map(|m| m * MIB)).boxed()
        } else {
            Just(None).boxed()
        },
    );
    (options, compact_knobs, device).prop_flat_map(|(o, k, d)| {
        let (small_device, mut device_memory, device_limit) = d;
        let has_cap = o.6.is_some() || o.7.is_some();
        // Garbage collection acts only under a cap.
        let gc = o.5.filter(|_| has_cap);
        if o.7.is_some() && device_memory.is_none() {
            device_memory = Some(8 * GIB);
        }
        let parts: Vec<String> = [
            o.1, o.2, o.3, o.4, gc, o.6, o.7, o.8, o.9, o.10, k.0, k.1, k.2, k.3, k.4, k.5, k.6,
            k.7, k.8, k.9, k.10, k.11,
        ]
        .into_iter()
        .flatten()
        .collect();
        let policy = o.0.to_string();
        Just(parts).prop_shuffle().prop_map(move |mut parts| {
            if !policy.is_empty() {
                parts.insert(0, policy.clone());
            }
            PageSetup {
                conf: parts.join(","),
                small_device,
                device_memory,
                device_limit,
            }
        })
    })
}
