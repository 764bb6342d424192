//! One test per `WGPOOL_CONF` option, showing what it changes in placement or behaviour
//! (mostly under `policy:pytorch`, whose rules are PyTorch's), plus the parser's error
//! messages, the `to_conf_string` round trip and panic-freedom on arbitrary input.
//!
//! By family: [`placement`] (policy, splitting and rounding), [`limits`] (garbage
//! collection, caps, segment sizes), [`modes`] (expandable segments, backend, overflow),
//! [`compact`] (the default policy's knobs) and [`parser`] (errors, round trip,
//! panic-freedom). This file holds what they share.

#[path = "../common/random_mix.rs"]
mod random_mix;

mod compact;
mod limits;
mod modes;
mod parser;
mod placement;

use proptest::prelude::*;
use wgpool::config::{
    Caching, CapError, Config, ConfigError, ExpandableSegments, OPTIONS, Overflow, Policy,
};
use wgpool::engine::{
    AllocError, Allocation, Engine, EngineError, EngineLimits, MemoryMode, MemoryStats, OomCause,
    PageMapping, SegmentId, SegmentKind, VirtualSegments,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Every key this file has a behaviour test for. `every_option_has_a_test` fails when an
/// option is added to `OPTIONS` without one.
const TESTED_KEYS: &[&str] = &[
    "policy",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "roundup_power2_divisions",
    "roundup_bypass_threshold_mb",
    "garbage_collection_threshold",
    "per_process_memory_fraction",
    "memory_limit_mb",
    "large_segment_size_mb",
    "expandable_segments",
    "backend",
    "overflow",
    "compact_min_share",
    "compact_reserved_slack",
    "compact_release_budget",
    "compact_recycle_rate",
    "compact_page_slack",
    "compact_slack_ramp",
    "compact_slack_on_growth",
    "compact_small_map_kb",
    "compact_share_idle",
    "page_reserve_chunks",
    "page_bind_batch",
    "reuse_cache",
];

#[test]
fn every_option_has_a_test() {
    for option in OPTIONS {
        assert!(
            TESTED_KEYS.contains(&option.key),
            "option `{}` has no behaviour test in tests/config_options/",
            option.key
        );
    }
    for key in TESTED_KEYS {
        assert!(
            OPTIONS.iter().any(|o| o.key == *key),
            "`{key}` is tested but is no longer an option"
        );
    }
}

/// An engine over virtual segments, checked after every call.
struct CheckedEngine {
    engine: Engine,
    device: VirtualSegments,
}

impl CheckedEngine {
    fn new(conf: &str) -> CheckedEngine {
        CheckedEngine::with_limits(conf, EngineLimits::unlimited())
    }

    fn with_limits(conf: &str, limits: EngineLimits) -> CheckedEngine {
        let config = Config::parse(conf).unwrap_or_else(|e| panic!("`{conf}`: {e}"));
        CheckedEngine {
            engine: Engine::new(config, limits).unwrap_or_else(|e| panic!("`{conf}`: {e}")),
            device: VirtualSegments::unlimited(),
        }
    }

    fn try_alloc_on(&mut self, size: u64, stream: u32) -> Result<Allocation, AllocError> {
        let result = self.engine.allocate(size, stream, &mut self.device);
        self.engine.check_invariants().unwrap();
        result
    }

    fn try_alloc(&mut self, size: u64) -> Result<Allocation, AllocError> {
        self.try_alloc_on(size, 0)
    }

    fn alloc_on(&mut self, size: u64, stream: u32) -> Allocation {
        self.try_alloc_on(size, stream)
            .unwrap_or_else(|e| panic!("allocate({size}): {e}"))
    }

    fn alloc(&mut self, size: u64) -> Allocation {
        self.alloc_on(size, 0)
    }

    fn free(&mut self, a: Allocation) {
        self.engine.free(a.block, &mut self.device).unwrap();
        self.engine.check_invariants().unwrap();
    }

    fn stats(&self) -> MemoryStats {
        self.engine.memory_stats()
    }

    fn reserved(&self) -> u64 {
        self.stats().reserved_bytes.all.current
    }

    fn segment_size(&self, id: SegmentId) -> u64 {
        self.engine
            .snapshot()
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.size)
            .expect("segment exists")
    }
}

fn invalid_value(conf: &str) -> (String, String, String, String) {
    match Config::parse(conf) {
        Err(
            ref e @ ConfigError::InvalidValue {
                key,
                ref value,
                ref reason,
                allowed,
            },
        ) => {
            let spec = OPTIONS.iter().find(|o| o.key == key).unwrap();
            assert_eq!(
                allowed, spec.allowed,
                "`{conf}`: allowed is not the table's"
            );
            let message = e.to_string();
            for part in [key, value.as_str(), allowed] {
                assert!(
                    message.contains(part),
                    "`{conf}`: `{message}` lacks `{part}`"
                );
            }
            (key.to_string(), value.clone(), reason.clone(), message)
        }
        other => panic!("`{conf}` should be an invalid value, got {other:?}"),
    }
}
