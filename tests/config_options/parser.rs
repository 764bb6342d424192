//! The parser: its error messages, the `to_conf_string` round trip, panic-freedom on
//! arbitrary input, and the limits on values that would overflow.

use super::*;

// ---------------------------------------------------------------------------------------
// Parser errors
// ---------------------------------------------------------------------------------------

#[test]
fn unknown_keys_are_refused_with_the_valid_keys() {
    match Config::parse("policy:pytorch,max_split_mb:128") {
        Err(ref e @ ConfigError::UnknownKey { ref key, ref valid }) => {
            assert_eq!(key, "max_split_mb");
            let all: Vec<&str> = OPTIONS.iter().map(|o| o.key).collect();
            assert_eq!(valid, &all);
            let message = e.to_string();
            assert!(message.contains("max_split_mb"), "{message}");
            for k in all {
                assert!(message.contains(k), "`{message}` does not list {k}");
            }
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_values_name_key_value_and_allowed() {
    let cases = [
        ("max_split_size_mb:19", "19"),
        ("max_split_size_mb:-5", "-5"),
        ("max_split_size_mb:1.5", "1.5"),
        ("max_split_size_mb:[1:2]", "[1:2]"),
        ("max_non_split_rounding_mb:0", "0"),
        ("roundup_power2_divisions:3", "3"),
        ("roundup_power2_divisions:0", "0"),
        ("roundup_power2_divisions:2048", "2048"),
        ("roundup_power2_divisions:[256:3]", "[256:3]"),
        ("roundup_power2_divisions:[512:2,256:1]", "[512:2,256:1]"),
        ("roundup_power2_divisions:[256:2,256:4]", "[256:2,256:4]"),
        ("roundup_power2_divisions:[>:2,256:1]", "[>:2,256:1]"),
        ("roundup_power2_divisions:[100:2]", "[100:2]"),
        ("roundup_power2_divisions:[x:2]", "[x:2]"),
        ("roundup_bypass_threshold_mb:0", "0"),
        ("garbage_collection_threshold:1", "1"),
        ("garbage_collection_threshold:0", "0"),
        ("garbage_collection_threshold:nan", "nan"),
        ("garbage_collection_threshold:inf", "inf"),
        ("per_process_memory_fraction:1.5", "1.5"),
        ("per_process_memory_fraction:-0.1", "-0.1"),
        ("memory_limit_mb:0", "0"),
        (
            "memory_limit_mb:99999999999999999999",
            "99999999999999999999",
        ),
        ("memory_limit_mb:18446744073709", "18446744073709"),
        ("large_segment_size_mb:9", "9"),
        ("expandable_segments:yes", "yes"),
        ("backend:gpu", "gpu"),
        ("overflow:disk", "disk"),
        ("policy:fast", "fast"),
        ("compact_min_share:2", "2"),
        ("compact_reserved_slack:10.5", "10.5"),
        ("compact_release_budget:nan", "nan"),
    ];
    for (conf, value) in cases {
        let (key, written, _, _) = invalid_value(conf);
        assert_eq!(format!("{key}:{written}"), conf);
        assert_eq!(written, value);
    }
}

#[test]
fn repeated_keys_are_refused() {
    for conf in [
        "policy:pytorch,policy:compact",
        "policy:pytorch,max_split_size_mb:64,policy:pytorch",
        " memory_limit_mb : 10 ,memory_limit_mb:10",
    ] {
        match Config::parse(conf) {
            Err(ref e @ ConfigError::DuplicateKey { key }) => {
                assert!(conf.matches(key).count() == 2, "{conf}: {key}");
                assert!(e.to_string().contains(key));
            }
            other => panic!("`{conf}`: {other:?}"),
        }
    }
}

#[test]
fn syntax_errors_are_refused_with_where_and_why() {
    let syntax = |conf: &str, reason_part: &str| match Config::parse(conf) {
        Err(ref e @ ConfigError::Syntax { ref reason, .. }) => {
            assert!(reason.contains(reason_part), "`{conf}`: {reason}");
            assert!(e.to_string().contains("key:value"), "{e}");
        }
        other => panic!("`{conf}` should be a syntax error, got {other:?}"),
    };
    syntax("max_split_size_mb", "missing `:`");
    syntax("policy:pytorch,max_split_size_mb", "missing `:`");
    syntax("policy:pytorch:compact", "`:` only inside");
    syntax("roundup_power2_divisions:[256:1,512:2", "never closed");
    syntax("roundup_power2_divisions:256:1]", "without a matching `[`");
    syntax("roundup_power2_divisions:[[256:1]]", "nested");
    syntax("roundup_power2_divisions:[256:1]x", "after the closing");
    syntax("roundup_power2_divisions:[256]", "key:value");
    syntax("roundup_power2_divisions:[256:1:2]", "key:value");
    syntax("policy:", "empty");
    // `a:b:c` has an unknown key before anything else.
    assert!(matches!(
        Config::parse("a:b:c"),
        Err(ConfigError::UnknownKey { .. })
    ));
    // Empty entries and surrounding spaces are fine.
    assert_eq!(Config::parse(""), Ok(Config::default()));
    assert_eq!(Config::parse(" , ,"), Ok(Config::default()));
    assert_eq!(
        Config::parse(" policy : pytorch , max_split_size_mb : 64 "),
        Config::parse("policy:pytorch,max_split_size_mb:64")
    );
}

/// Issue 25: what a message quotes of the input shows invisible characters escaped (a
/// zero-width space, a byte-order mark, a no-break space), so that `policy` and
/// `\u{200b}policy` do not read alike; the error keeps the text as written.
#[test]
fn invisible_characters_in_a_configuration_are_quoted_escaped() {
    let refused = |conf: &str| -> String {
        let message = Config::parse(conf).unwrap_err().to_string();
        assert!(
            !message.contains(['\u{200b}', '\u{feff}', '\u{a0}']),
            "`{conf}`: {message}"
        );
        message
    };
    let message = refused("\u{200b}policy:pytorch");
    assert!(message.contains("`\\u{200b}policy`"), "{message}");
    assert!(matches!(
        Config::parse("\u{feff}policy:pytorch"),
        Err(ConfigError::UnknownKey { key, .. }) if key == "\u{feff}policy"
    ));
    let message = refused("policy:py\u{a0}torch");
    assert!(message.contains("`py\\u{a0}torch`"), "{message}");
    let message = refused("roundup_power2_divisions:[2\u{200b}56:1]");
    assert!(message.contains("`2\\u{200b}56`"), "{message}");
    let message = refused("policy\u{feff}");
    assert!(message.contains("`policy\\u{feff}`"), "{message}");
}

/// A list key of 2^44 MiB and more overflows `mb << 20`: the parser accepts it, but the
/// bound becomes 0 and `to_conf_string` writes `0:2`, which does not parse back.
#[test]
fn huge_list_keys_are_refused_and_the_largest_round_trips() {
    for conf in [
        "roundup_power2_divisions:[17592186044416:2]",
        "roundup_power2_divisions:[1:4,35184372088832:2,>:8]",
        "roundup_power2_divisions:[137438953472:2]",
    ] {
        let error = Config::parse(conf).unwrap_err().to_string();
        assert!(error.contains("above the largest"), "`{conf}`: {error}");
    }
    let largest = Config::parse("roundup_power2_divisions:[68719476736:2]").unwrap();
    assert_eq!(Config::parse(&largest.to_conf_string()), Ok(largest));
}

// ---------------------------------------------------------------------------------------
// Round trip and panic-freedom
// ---------------------------------------------------------------------------------------

fn valid_roundup() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..=10).prop_map(|e| (1u32 << e).to_string()),
        (
            prop::collection::btree_map(0u32..=36, 0u32..=10, 1..=6),
            prop::option::of(0u32..=10),
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
            }),
    ]
}

fn valid_conf() -> impl Strategy<Value = String> {
    let o = |p: f64, s: BoxedStrategy<String>| prop::option::weighted(p, s);
    let entries = (
        o(
            0.5,
            prop_oneof![Just("pytorch"), Just("compact")]
                .prop_map(|v| format!("policy:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            (20u64..=2_097_151)
                .prop_map(|v| format!("max_split_size_mb:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            (1u64..=2_097_151)
                .prop_map(|v| format!("max_non_split_rounding_mb:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            valid_roundup()
                .prop_map(|v| format!("roundup_power2_divisions:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            (1u64..=2_097_151)
                .prop_map(|v| format!("roundup_bypass_threshold_mb:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            (0.0f64..1.0)
                .prop_filter("strictly positive", |t| *t > 0.0)
                .prop_map(|v| format!("garbage_collection_threshold:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            (0.0f64..=1.0)
                .prop_map(|v| format!("per_process_memory_fraction:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            (1u64..=1 << 40)
                .prop_map(|v| format!("memory_limit_mb:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            (10u64..=2_097_151)
                .prop_map(|v| format!("large_segment_size_mb:{v}"))
                .boxed(),
        ),
        o(
            0.3,
            prop_oneof![Just("False"), Just("false"), Just("0"), Just("auto")]
                .prop_map(|v| format!("expandable_segments:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            prop_oneof![Just("native"), Just("passthrough")]
                .prop_map(|v| format!("backend:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            prop_oneof![Just("none"), Just("host")]
                .prop_map(|v| format!("overflow:{v}"))
                .boxed(),
        ),
    );
    let compact = (
        o(
            0.5,
            (0.0f64..=1.0)
                .prop_map(|v| format!("compact_min_share:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            (0.0f64..=10.0)
                .prop_map(|v| format!("compact_reserved_slack:{v}"))
                .boxed(),
        ),
        o(
            0.5,
            (0.0f64..=1000.0)
                .prop_map(|v| format!("compact_release_budget:{v}"))
                .boxed(),
        ),
    );
    (entries, compact).prop_flat_map(|(e, k)| {
        let parts: Vec<String> = [
            e.0, e.1, e.2, e.3, e.4, e.5, e.6, e.7, e.8, e.9, e.10, e.11, k.0, k.1, k.2,
        ]
        .into_iter()
        .flatten()
        .collect();
        Just(parts).prop_shuffle().prop_map(|p| p.join(","))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn to_conf_string_round_trips(conf in valid_conf()) {
        let config = Config::parse(&conf).map_err(|e| TestCaseError::fail(format!("`{conf}`: {e}")))?;
        let written = config.to_conf_string();
        prop_assert_eq!(Config::parse(&written), Ok(config.clone()), "`{}` -> `{}`", conf, written);
        prop_assert_eq!(Config::parse(&written).unwrap().to_conf_string(), written);
    }

    #[test]
    fn parsing_arbitrary_strings_never_panics(text in any::<String>()) {
        let _ = Config::parse(&text);
    }

    #[test]
    fn parsing_near_valid_strings_never_panics_and_accepted_ones_round_trip(
        text in "[a-z_0-9:,\\[\\]>.\\- ]{0,60}",
        key in prop::sample::select(OPTIONS.iter().map(|o| o.key).collect::<Vec<_>>()),
        value in "[0-9a-zA-Z:,\\[\\]>.\\-]{0,24}",
    ) {
        for candidate in [text.clone(), format!("{key}:{value}"), format!("{key}:{value},{text}")] {
            match Config::parse(&candidate) {
                Ok(config) => {
                    let written = config.to_conf_string();
                    prop_assert_eq!(Config::parse(&written), Ok(config), "`{}` -> `{}`", candidate, written);
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}

/// Issue 15 F1: a `max_split_size_mb` beyond the largest segment is refused with the limit
/// in the message. Before, the parser took any value of at least 20, and under a cap the
/// retry chain searched the free index for a size past its last class and panicked.
#[test]
fn max_split_size_beyond_the_largest_segment_is_refused() {
    let error = Config::parse("max_split_size_mb:137438953472,memory_limit_mb:64").unwrap_err();
    assert!(
        matches!(
            error,
            ConfigError::InvalidValue {
                key: "max_split_size_mb",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("2097151"), "{error}");
    // The largest value accepted runs the repro's retry chain to a clean out-of-memory.
    let config = Config::parse("max_split_size_mb:2097151,memory_limit_mb:64").unwrap();
    let mut engine = Engine::new(config, EngineLimits::unlimited()).unwrap();
    let mut device = VirtualSegments::unlimited();
    engine.allocate(3_145_728, 0, &mut device).unwrap();
    let error = engine.allocate(62_914_560, 0, &mut device).unwrap_err();
    assert!(matches!(error, AllocError::OutOfMemory(_)), "{error:?}");
    engine.check_invariants().unwrap();
    // A configuration changed after parsing is checked by the engine too.
    let changed = Config::default()
        .with_max_split_size(Some(1 << 57))
        .with_memory_limit(Some(64 * MIB));
    let error = Engine::new(changed, EngineLimits::unlimited()).unwrap_err();
    assert!(
        matches!(
            &error,
            EngineError::Config(ConfigError::InvalidValue {
                key: "max_split_size_mb",
                ..
            })
        ),
        "{error:?}"
    );
}

/// Issue 15 F2: `rounded + max_non_split_rounding` overflowed. The parser now refuses a
/// rounding beyond the largest segment, and the largest it accepts behaves as "any cached
/// block may serve": the cached 40 MiB block serves the 30 MiB request, so one segment.
#[test]
fn max_non_split_rounding_beyond_the_largest_segment_is_refused() {
    let error = Config::parse(
        "policy:pytorch,max_split_size_mb:20,max_non_split_rounding_mb:17592186044386",
    )
    .unwrap_err();
    assert!(
        matches!(
            error,
            ConfigError::InvalidValue {
                key: "max_non_split_rounding_mb",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("2097151"), "{error}");
    for rounding in ["21", "2097151"] {
        let conf =
            format!("policy:pytorch,max_split_size_mb:20,max_non_split_rounding_mb:{rounding}");
        let mut engine =
            Engine::new(Config::parse(&conf).unwrap(), EngineLimits::unlimited()).unwrap();
        let mut device = VirtualSegments::unlimited();
        let a = engine.allocate(40 * MIB, 0, &mut device).unwrap();
        engine.free(a.block, &mut device).unwrap();
        engine.allocate(30 * MIB, 0, &mut device).unwrap();
        assert_eq!(engine.memory_stats().num_device_alloc, 1, "`{conf}`");
    }
    let changed = Config::default().with_max_non_split_rounding(u64::MAX);
    assert!(Engine::new(changed, EngineLimits::unlimited()).is_err());
}

/// `Config` parses through `FromStr`, and the builders give what parsing gives.
#[test]
fn config_from_str_equals_the_builders() {
    let parsed: Config =
        "policy:pytorch,max_split_size_mb:128,memory_limit_mb:4096,backend:passthrough"
            .parse()
            .unwrap();
    let built = Config::default()
        .with_policy(Policy::Pytorch)
        .with_max_split_size(Some(128 * MIB))
        .with_memory_limit(Some(4096 * MIB))
        .with_backend(Caching::Passthrough);
    assert_eq!(parsed, built);
    assert!("max_split_size_mb:1".parse::<Config>().is_err());
    assert_eq!(built.validate(), Ok(()));
}
