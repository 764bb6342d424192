//! Live monitoring: `MemoryReading` with a pool in the process, and `wgpool info --watch`,
//! bounded by `--count`.

mod common;

use std::process::Command;

use wgpool::config::Config;
use wgpool::monitor::MemoryReading;
use wgpool::pool::Pool;

#[test]
fn a_reading_reports_the_heaps_and_the_pool() {
    let gpu = common::gpu();
    let pool = Pool::from_context(gpu, Config::parse("policy:pytorch").unwrap()).unwrap();
    let block = pool.alloc(3 << 20).unwrap();
    let reading = MemoryReading::now(gpu.adapter(), Some(&pool));
    let stats = reading.pool.expect("a pool was given");
    assert_eq!(stats.allocated_bytes, 3 << 20);
    assert_eq!(stats.reserved_bytes, 20 << 20, "one 20 MiB large segment");
    assert_eq!((stats.segments, stats.blocks), (1, 1));
    // Vulkan reports its heaps; other backends say that they cannot.
    let text = reading.render();
    assert!(text.contains("pool: allocated 3.00 MiB"), "{text}");
    if gpu.capabilities().memory_heaps.is_available() {
        let memory = reading.memory.as_ref().expect("the heaps are known");
        assert!(!memory.heaps.is_empty());
        assert!(text.contains("heap 0"), "{text}");
    } else {
        assert!(reading.memory.is_none());
        assert!(text.contains("memory heaps: not available"), "{text}");
    }
    drop(block);
    let after = MemoryReading::now(gpu.adapter(), Some(&pool)).pool.unwrap();
    assert_eq!(after.allocated_bytes, 0);
    assert_eq!(after.peak_allocated_bytes, 3 << 20);
    assert!(MemoryReading::now(gpu.adapter(), None).pool.is_none());
}

#[test]
fn info_watch_prints_count_reports_and_stops() {
    let gpu = common::gpu();
    let heaps_known = gpu.capabilities().memory_heaps.is_available();
    // The adapters of the context's backend only: what it says of heaps holds for them
    // (Mesa's GL adapter, listed beside lavapipe when WGPU_BACKEND is unset, has none).
    let backend = gpu.info().backend.to_str();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_wgpool"))
            .args(args)
            .env("WGPU_BACKEND", backend)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&["info", "--watch", "--count", "3", "--interval-ms", "20"]);
    let stamps = text.lines().filter(|l| l.starts_with('[')).count();
    assert_eq!(stamps % 3, 0, "{text}");
    assert!(stamps >= 3, "{text}");
    let heaps = if heaps_known {
        "heap 0"
    } else {
        "memory heaps: not available"
    };
    assert!(text.contains(heaps), "{text}");
    let json = run(&[
        "info",
        "--watch",
        "--count",
        "2",
        "--interval-ms",
        "20",
        "--json",
    ]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 2 && lines.len() % 2 == 0, "{json}");
    for line in &lines {
        assert!(line["adapter"].is_string(), "{line}");
        // Adapters of one name (a GPU through two backends) are told apart.
        assert!(line["index"].is_u64(), "{line}");
        let backend = line["backend"].as_str().expect("backend");
        assert!(
            ["vulkan", "gl", "dx12", "metal"].contains(&backend),
            "{line}"
        );
        assert!(line["unix_ms"].as_u64().unwrap() > 0, "{line}");
        if !heaps_known {
            assert!(line["memory"].is_null(), "{line}");
            continue;
        }
        let heaps = line["memory"]["heaps"].as_array().expect("heaps");
        let budget = line["memory"]["budget_supported"].as_bool().unwrap();
        for heap in heaps {
            assert_eq!(heap["usage"].is_u64(), budget, "{heap}");
        }
    }
    // --count needs --watch.
    let out = Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .args(["info", "--count", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
