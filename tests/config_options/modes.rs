//! How memory is held: `expandable_segments`, `backend`, `overflow`, `page_reserve_chunks`,
//! `page_bind_batch`.

use super::*;

// ---------------------------------------------------------------------------------------
// expandable_segments
// ---------------------------------------------------------------------------------------

#[test]
fn expandable_segments_takes_auto_true_and_false() {
    for (values, expected) in [
        (&["False", "false", "0"][..], ExpandableSegments::False),
        (&["True", "true", "1"][..], ExpandableSegments::True),
        (&["auto"][..], ExpandableSegments::Auto),
    ] {
        for value in values {
            let config = Config::parse(&format!("expandable_segments:{value}")).unwrap();
            assert_eq!(config.expandable_segments, Some(expected), "{value}");
            assert_eq!(config.expandable(), expected);
        }
    }
    let (key, written, _, message) = invalid_value("expandable_segments:maybe");
    assert_eq!(
        (key.as_str(), written.as_str()),
        ("expandable_segments", "maybe")
    );
    assert!(message.contains("auto"), "{message}");
    // Each policy's default: auto for compact, PyTorch's False for pytorch.
    assert_eq!(Config::default().expandable(), ExpandableSegments::Auto);
    assert_eq!(
        Config::parse("policy:pytorch").unwrap().expandable(),
        ExpandableSegments::False
    );
    // Passthrough maps no pages: each value is allowed, the two together are not, and the
    // message names both.
    for conf in [
        "backend:passthrough,expandable_segments:True",
        "expandable_segments:true,backend:passthrough",
    ] {
        let error = Config::parse(conf).unwrap_err();
        assert!(
            matches!(
                error,
                ConfigError::Conflict {
                    option: "expandable_segments:True",
                    other: "backend:passthrough",
                    ..
                }
            ),
            "{conf}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains("expandable_segments:True")
                && message.contains("backend:passthrough")
                && message.contains("maps no pages")
                && !message.contains("allowed"),
            "{message}"
        );
    }
}

/// The memory mode follows `expandable_segments` and what the source can do, and
/// `memory_summary` names it.
#[test]
fn memory_mode_follows_expandable_segments_and_the_source() {
    let pages = Some(VirtualSegments::H200_PAGES);
    for (conf, can_map, expected) in [
        ("", true, Some(MemoryMode::Pages)),
        ("", false, Some(MemoryMode::Segments)),
        (
            "expandable_segments:auto",
            false,
            Some(MemoryMode::Segments),
        ),
        (
            "expandable_segments:False",
            true,
            Some(MemoryMode::Segments),
        ),
        ("expandable_segments:True", true, Some(MemoryMode::Pages)),
        ("expandable_segments:True", false, None),
        ("policy:pytorch", true, Some(MemoryMode::Segments)),
        (
            "policy:pytorch,expandable_segments:True",
            true,
            Some(MemoryMode::Pages),
        ),
        ("backend:passthrough", true, Some(MemoryMode::Segments)),
    ] {
        let limits =
            EngineLimits::unlimited().with_page_mapping(if can_map { pages } else { None });
        match (Engine::new(Config::parse(conf).unwrap(), limits), expected) {
            (Ok(engine), Some(mode)) => {
                assert_eq!(engine.memory_mode(), mode, "`{conf}`");
                let summary = engine.memory_summary();
                assert!(
                    summary.contains(&format!("memory mode: {}", mode.name())),
                    "`{conf}`: {summary}"
                );
                // Pages mode adds what mapping has done; segments mode counts segments.
                assert_eq!(
                    summary.contains("pages mapped:"),
                    mode == MemoryMode::Pages,
                    "`{conf}`: {summary}"
                );
            }
            (Err(EngineError::PagesUnavailable), None) => {}
            (other, _) => panic!("`{conf}` (can map: {can_map}): {other:?}"),
        }
    }
    let message = EngineError::PagesUnavailable.to_string();
    assert!(message.contains("expandable_segments:auto"), "{message}");
}

// ---------------------------------------------------------------------------------------
// backend
// ---------------------------------------------------------------------------------------

#[test]
fn passthrough_backend_makes_one_segment_per_request_and_releases_at_free() {
    assert_eq!(
        Config::parse("backend:native").unwrap().backend,
        Caching::Native
    );
    assert_eq!(
        Config::parse("backend:passthrough").unwrap().backend,
        Caching::Passthrough
    );
    invalid_value("backend:cudaMallocAsync");

    let mut pool = CheckedEngine::new("policy:pytorch,backend:passthrough");
    let a = pool.alloc(1000);
    let b = pool.alloc(1000);
    let c = pool.alloc(3 * MIB + 1);
    assert_ne!(a.segment, b.segment);
    for (x, size) in [(a, 1024), (b, 1024), (c, 3 * MIB + 512)] {
        assert_eq!(
            (x.offset, x.block_size, pool.segment_size(x.segment)),
            (0, size, size)
        );
    }
    assert_eq!(pool.stats().num_device_alloc, 3);
    assert_eq!(pool.reserved(), 2048 + 3 * MIB + 512);
    pool.free(a);
    assert_eq!(pool.stats().num_device_free, 1);
    assert_eq!(pool.reserved(), 1024 + 3 * MIB + 512);
    // Nothing is cached: the same request makes a new segment again.
    pool.alloc(1000);
    assert_eq!(pool.stats().num_device_alloc, 4);
    pool.free(b);
    pool.free(c);
    assert_eq!(pool.stats().num_device_free, 3);

    // The native pool packs both small requests into one 2 MiB segment and keeps it.
    let mut pool = CheckedEngine::new("policy:pytorch,backend:native");
    let a = pool.alloc(1000);
    let b = pool.alloc(1000);
    assert_eq!((a.segment, b.offset), (b.segment, 1024));
    pool.free(a);
    pool.free(b);
    let stats = pool.stats();
    assert_eq!((stats.num_device_alloc, stats.num_device_free), (1, 0));
    assert_eq!(stats.reserved_bytes.all.current, 2 * MIB);
}

// ---------------------------------------------------------------------------------------
// overflow
// ---------------------------------------------------------------------------------------

#[test]
fn overflow_parses_and_the_engine_ignores_it() {
    assert_eq!(Config::default().overflow, Overflow::None);
    assert_eq!(
        Config::parse("overflow:none").unwrap().overflow,
        Overflow::None
    );
    assert_eq!(
        Config::parse("overflow:host").unwrap().overflow,
        Overflow::Host
    );
    invalid_value("overflow:disk");
    // The engine's placement and out-of-memory errors are the same with either value; the
    // wgpu pool is what serves overflow from host memory.
    let run = |conf: &str| {
        let mut pool = CheckedEngine::new(conf);
        let a = pool.alloc(30 * MIB);
        let err = pool.try_alloc(30 * MIB).unwrap_err();
        pool.free(a);
        (pool.engine.snapshot(), err)
    };
    let (plain, plain_err) = run("policy:pytorch,memory_limit_mb:40");
    let (host, host_err) = run("policy:pytorch,memory_limit_mb:40,overflow:host");
    assert_eq!(plain, host);
    assert_eq!(plain_err, host_err);
    match host_err {
        AllocError::OutOfMemory(oom) => assert_eq!(oom.host_overflow, None),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// page_reserve_chunks
// ---------------------------------------------------------------------------------------

/// The engine's snapshot after a pages-mode mix under `conf` on an H200-sized device: for
/// options that live below the engine, whose values must not change placement.
fn pages_placement(conf: &str) -> Vec<wgpool::engine::SegmentSnapshot> {
    let pages = Some(VirtualSegments::H200_PAGES);
    let limits = EngineLimits::unlimited().with_page_mapping(pages);
    let mut pool = CheckedEngine::with_limits(conf, limits);
    pool.device = VirtualSegments::unlimited().with_pages(pages);
    assert_eq!(pool.engine.memory_mode(), MemoryMode::Pages);
    let blocks: Vec<Allocation> = (1..20u64).map(|i| pool.alloc(i * 3 * MIB + 512)).collect();
    for block in blocks.into_iter().step_by(2) {
        pool.free(block);
    }
    pool.engine.snapshot()
}

/// `page_reserve_chunks` takes 0 to 8 (0 by default) and round-trips; the engine places
/// exactly the same with any value: the reserve lives below it, in the pages-mode memory
/// (its behaviour on a device is tested in `tests/reserve_gpu.rs`).
#[test]
fn page_reserve_chunks_takes_0_to_8_and_the_engine_ignores_it() {
    assert_eq!(Config::default().page_reserve_chunks, 0);
    for n in 0..=8u32 {
        let config = Config::parse(&format!("page_reserve_chunks:{n}")).unwrap();
        assert_eq!(config.page_reserve_chunks, n);
        assert_eq!(Config::parse(&config.to_conf_string()).unwrap(), config);
    }
    for bad in ["9", "-1", "x", "1.5"] {
        let (key, written, _, _) = invalid_value(&format!("page_reserve_chunks:{bad}"));
        assert_eq!(
            (key.as_str(), written.as_str()),
            ("page_reserve_chunks", bad)
        );
    }
    assert!(
        Config::default()
            .with_page_reserve_chunks(9)
            .validate()
            .is_err()
    );
    assert_eq!(
        pages_placement("page_reserve_chunks:0"),
        pages_placement("page_reserve_chunks:8")
    );
}

// ---------------------------------------------------------------------------------------
// page_bind_batch
// ---------------------------------------------------------------------------------------

/// `page_bind_batch` takes 1 to 256 (16 by default) and round-trips; the engine places
/// exactly the same with any value: batching lives below it, in the pages-mode memory (its
/// behaviour on a device is tested in `tests/sparse_gpu.rs`).
#[test]
fn page_bind_batch_takes_1_to_256_and_the_engine_ignores_it() {
    assert_eq!(Config::default().page_bind_batch, 16);
    for n in [1u32, 2, 16, 255, 256] {
        let config = Config::parse(&format!("page_bind_batch:{n}")).unwrap();
        assert_eq!(config.page_bind_batch, n);
        assert_eq!(Config::parse(&config.to_conf_string()).unwrap(), config);
    }
    for bad in ["0", "257", "-1", "x", "1.5"] {
        let (key, written, _, _) = invalid_value(&format!("page_bind_batch:{bad}"));
        assert_eq!((key.as_str(), written.as_str()), ("page_bind_batch", bad));
    }
    for bad in [0, 257] {
        assert!(
            Config::default()
                .with_page_bind_batch(bad)
                .validate()
                .is_err()
        );
    }
    assert!(
        Config::default()
            .with_page_bind_batch(256)
            .validate()
            .is_ok()
    );
    assert_eq!(
        pages_placement("page_bind_batch:1"),
        pages_placement("page_bind_batch:256")
    );
}

// ---------------------------------------------------------------------------------------
// reuse_cache
// ---------------------------------------------------------------------------------------

/// `reuse_cache` is a GPU pool's (the engine has no cache): the parser's values and each
/// policy's default here; what it changes in a pool's placement is tested on the GPU
/// (`tests/pool_gpu.rs`, `tests/replay_gpu_cli.rs`).
#[test]
fn reuse_cache_takes_auto_true_and_false_and_follows_the_policy() {
    for (values, expected) in [
        (&["False", "false", "0"][..], Some(false)),
        (&["True", "true", "1"][..], Some(true)),
        (&["auto"][..], None),
    ] {
        for value in values {
            let config = Config::parse(&format!("reuse_cache:{value}")).unwrap();
            assert_eq!(config.reuse_cache, expected, "{value}");
            let round_trip = Config::parse(&config.to_conf_string()).unwrap();
            assert_eq!(round_trip.reuse_cache, expected, "{value}");
        }
    }
    let (key, written, _, message) = invalid_value("reuse_cache:sometimes");
    assert_eq!(
        (key.as_str(), written.as_str()),
        ("reuse_cache", "sometimes")
    );
    assert!(message.contains("auto"), "{message}");
    // `auto`: on for `policy:compact` in pages mode only.
    assert!(Config::default().reuses_blocks(true));
    assert!(!Config::default().reuses_blocks(false));
    assert!(!Config::parse("policy:pytorch").unwrap().reuses_blocks(true));
    assert!(
        !Config::parse("policy:pytorch")
            .unwrap()
            .reuses_blocks(false)
    );
    for pages in [true, false] {
        let on = Config::parse("policy:pytorch,reuse_cache:True").unwrap();
        assert!(on.reuses_blocks(pages));
        let off = Config::parse("reuse_cache:False").unwrap();
        assert!(!off.reuses_blocks(pages));
    }
}
