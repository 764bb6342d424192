//! `wgpool replay TRACE --gpu`: a trace through a real pool on the test adapter (lavapipe
//! in CI), in both memory modes.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const MIB: u64 = 1 << 20;

/// A trace: 40 allocations of 1 to 40 MiB, every other one freed, then the rest freed.
fn trace_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!("wgpool-replay-gpu-{}.csv", std::process::id()));
    let mut rows = String::from("action,id,size,stream\n");
    for i in 1..=40u64 {
        rows.push_str(&format!("alloc,{i},{},0\n", i * MIB + 100));
        if i % 2 == 0 {
            rows.push_str(&format!("free,{},{},0\n", i - 1, (i - 1) * MIB + 100));
        }
    }
    for i in (2..=40u64).step_by(2) {
        rows.push_str(&format!("free,{i},{},0\n", i * MIB + 100));
    }
    std::fs::write(&path, rows).unwrap();
    path
}

/// The default chunk policy's smallest chunk on the test adapter (1/2048 of its memory).
fn smallest_chunk() -> u64 {
    let gpu = wgpool::gpu::GpuContext::headless(&Default::default()).unwrap();
    match gpu.page_mapping() {
        Ok(sparse) => {
            let facts = sparse.facts();
            wgpool::gpu::sparse::ChunkPolicy::default().chunk_size(
                0,
                facts.heap_size,
                facts.page_size,
            )
        }
        Err(_) => 0,
    }
}

fn replay_gpu(trace: &PathBuf, extra: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .arg("replay")
        .arg(trace)
        .args(["--gpu", "--json"])
        .args(extra)
        .env_remove("WGPOOL_CONF")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn replay_on_the_gpu_reports_device_memory_and_driver_time_in_both_modes() {
    let trace = trace_file();
    let segments = replay_gpu(
        &trace,
        &["--conf", "expandable_segments:False", "--scale", "2"],
    );
    let default = replay_gpu(&trace, &["--scale", "2"]);
    let _ = std::fs::remove_file(&trace);
    assert_eq!(segments["mode"], "segments");
    for report in [&segments, &default] {
        assert_eq!(report["ops"], 80);
        assert_eq!(report["scale"], 2);
        // The largest live set: allocations 21..=40 of the halved sizes, bar the odd frees.
        let peak_live = report["peak_live_bytes"].as_u64().unwrap();
        assert!(peak_live > 200 * MIB && peak_live < 420 * MIB, "{report}");
        let reserved = report["peak_reserved_bytes"].as_u64().unwrap();
        let device = report["device_memory_peak_bytes"].as_u64().unwrap();
        assert!(reserved >= peak_live, "{report}");
        // Device memory as the memory layer counts it stays within 1% of the engine's figure,
        // or, for a pool this small, within the smallest chunk and a granule.
        let slack = if report["mode"] == "pages" {
            (reserved / 100).max(smallest_chunk() + 2 * MIB)
        } else {
            0
        };
        assert!(device >= reserved && device <= reserved + slack, "{report}");
        assert!(report["driver_time_s"].as_f64().unwrap() >= 0.0);
        assert!(report["device_allocations"].as_u64().unwrap() > 0);
        // Memory given back is counted (none needs to be: every block is freed into the cache).
        assert!(
            report["device_frees"].as_u64().unwrap()
                <= report["device_allocations"].as_u64().unwrap(),
            "{report}"
        );
        assert_eq!(report["num_ooms"], 0);
    }
    assert_eq!(segments["bind_calls"], 0);
    match default["mode"].as_str().unwrap() {
        "pages" => assert!(default["bind_calls"].as_u64().unwrap() > 0, "{default}"),
        other => assert_eq!(other, "segments"),
    }
}

#[test]
fn scale_needs_gpu_and_a_positive_divisor() {
    let trace =
        std::env::temp_dir().join(format!("wgpool-replay-gpu-s-{}.csv", std::process::id()));
    std::fs::write(&trace, "action,id,size,stream\nalloc,1,4096,0\n").unwrap();
    for args in [vec!["--scale", "2"], vec!["--gpu", "--scale", "0"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_wgpool"))
            .arg("replay")
            .arg(&trace)
            .args(&args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?} should be refused");
        assert!(!String::from_utf8_lossy(&output.stderr).is_empty());
    }
    let _ = std::fs::remove_file(&trace);
}
