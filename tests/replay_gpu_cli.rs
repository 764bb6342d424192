//! `wgpool replay TRACE --gpu`: a trace through a real pool on the test adapter (lavapipe
//! in CI), in both memory modes.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

const MIB: u64 = 1 << 20;

/// A trace: 40 allocations of 1 to 40 MiB, every other one freed, then the rest freed, in
/// a file of the caller's own: tests run in parallel, and each removes its file at the end.
fn trace_file() -> PathBuf {
    static FILES: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "wgpool-replay-gpu-{}-{}.csv",
        std::process::id(),
        FILES.fetch_add(1, Ordering::Relaxed)
    ));
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
    let gpu = common::gpu();
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
    assert_eq!(segments["maps_queued"], 0);
    match default["mode"].as_str().unwrap() {
        "pages" => {
            assert!(default["bind_calls"].as_u64().unwrap() > 0, "{default}");
            // Maps wait for shared calls by default (`page_bind_batch`); every run ends with
            // them submitted, so none of them is left out of the bind calls.
            assert!(default["maps_queued"].as_u64().unwrap() > 0, "{default}");
        }
        other => assert_eq!(other, "segments"),
    }
}

/// The device heap is read only with `--heap-watch`, in the first run and inside its time:
/// without it no run makes a driver call of the harness's own (the timed runs stay what
/// PyTorch's timed loop is), and the report has no heap figure.
#[test]
fn the_heap_is_read_only_with_heap_watch_and_in_the_first_run() {
    let trace = trace_file();
    let args = ["--scale", "4", "--repeat", "2"];
    let plain = replay_gpu(&trace, &args);
    assert!(plain["heap_usage_peak_bytes"].is_null(), "{plain}");
    let runs = plain["runs"].as_array().expect("runs");
    assert!(runs.iter().all(|r| r["heap_query_s"] == 0.0), "{plain}");

    let watched = replay_gpu(&trace, &[&args[..], &["--heap-watch"]].concat());
    let runs = watched["runs"].as_array().expect("runs");
    assert_eq!(runs[1]["heap_query_s"], 0.0, "{watched}");
    let first = &runs[0];
    let reads = first["heap_query_s"].as_f64().unwrap();
    assert!(reads <= first["replay_time_s"].as_f64().unwrap(), "{first}");
    let budget = common::gpu()
        .memory_info()
        .is_some_and(|info| info.budget_supported);
    if budget {
        // The trace allocates device memory, so the first run read the heap at least once.
        assert!(reads > 0.0, "{watched}");
        assert!(watched["heap_usage_peak_bytes"].is_u64(), "{watched}");
    } else {
        assert!(watched["heap_usage_peak_bytes"].is_null(), "{watched}");
    }
    std::fs::remove_file(&trace).unwrap();
}

/// Issue 21: the pool's time per operation beside the engine's on the same operations, and
/// `--repeat N`: N runs in one process, the cache released between them, the first run and
/// the median of the rest reported. A replay puts no work on the GPU, so pages mode orders
/// nothing across wrappers.
#[test]
fn replay_reports_the_pool_and_engine_time_per_operation_and_repeats() {
    let trace = trace_file();
    for conf in ["expandable_segments:False", "expandable_segments:auto"] {
        let report = replay_gpu(&trace, &["--conf", conf, "--scale", "4", "--repeat", "3"]);
        assert_eq!(report["repeat"], 3, "{report}");
        let runs = report["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 3);
        for run in runs {
            let replay = run["replay_time_s"].as_f64().unwrap();
            let outside = replay
                - run["driver_time_s"].as_f64().unwrap()
                - run["unmap_wait_s"].as_f64().unwrap()
                - run["heap_query_s"].as_f64().unwrap();
            let ns = run["pool_ns_per_op"].as_f64().unwrap();
            assert!(ns > 0.0, "{run}");
            assert!(
                (ns - outside * 1e9 / 80.0).abs() < 1e-3 * ns.max(1.0),
                "{run}"
            );
            assert_eq!(run["wrapper_orderings"], 0, "{run}");
        }
        // The heap is watched in the first run only.
        assert!(
            runs[1..].iter().all(|r| r["heap_query_s"] == 0.0),
            "{report}"
        );
        // The cache was released between runs: every run allocated device memory again.
        assert!(
            runs.iter()
                .all(|r| r["device_allocations"].as_u64().unwrap() > 0)
        );
        assert_eq!(report["pool_ns_per_op"], runs[0]["pool_ns_per_op"]);
        let rest = &report["rest_median"];
        // Each run's peaks are the peaks so far: the first run's are the report's, they
        // never fall, and the rest's are the last run's.
        for key in ["device_memory_peak_bytes", "peak_reserved_bytes"] {
            assert_eq!(runs[0][key], report[key], "{key}: {report}");
            for pair in runs.windows(2) {
                assert!(
                    pair[1][key].as_u64() >= pair[0][key].as_u64(),
                    "{key}: {report}"
                );
            }
            assert_eq!(rest[key], runs[2][key], "{key}: {report}");
        }
        let mut rest_ns: Vec<f64> = runs[1..]
            .iter()
            .map(|r| r["pool_ns_per_op"].as_f64().unwrap())
            .collect();
        rest_ns.sort_by(f64::total_cmp);
        assert_eq!(rest["pool_ns_per_op"].as_f64().unwrap(), rest_ns[1]);
        let engine = report["engine_ns_per_op"]
            .as_f64()
            .expect("engine baseline");
        assert!(engine > 0.0);
        let ratio = report["pool_over_engine"].as_f64().unwrap();
        assert!((ratio - rest_ns[1] / engine).abs() < 1e-9, "{report}");
        assert_eq!(report["wrapper_orderings"], 0);
    }
    // The text report gives the peaks over all runs beside the rest runs' times.
    let output = Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .arg("replay")
        .arg(&trace)
        .args(["--gpu", "--scale", "4", "--repeat", "2", "--keep-cache"])
        .env_remove("WGPOOL_CONF")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("repeat             2 runs"), "{text}");
    assert!(
        text.contains("over all runs      device memory peak"),
        "{text}"
    );
    let _ = std::fs::remove_file(&trace);
}

/// `engine_peak_reserved_bytes` is the engine alone on a model of the same device: where no
/// size repeats (the reuse cache serves nothing) the pool places every block as it, to the
/// byte, in both modes; on the GPT-2 training trace, whose sizes repeat, the reuse cache (on
/// here by choice: fixed segments have it off by default) hands dropped blocks back without
/// asking the engine, and the two differ; without it they are equal.
#[test]
fn the_report_tells_the_pools_placement_from_its_engines() {
    let trace = trace_file();
    for conf in ["expandable_segments:False", "expandable_segments:auto"] {
        let report = replay_gpu(&trace, &["--conf", conf, "--scale", "2"]);
        let engine = report["engine_peak_reserved_bytes"]
            .as_u64()
            .expect("engine baseline");
        assert_eq!(
            report["peak_reserved_bytes"].as_u64(),
            Some(engine),
            "{report}"
        );
    }
    let _ = std::fs::remove_file(&trace);
    let gpt2 = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/gpt2-train.csv"
    ));
    let args = [
        "--conf",
        "expandable_segments:False,reuse_cache:True",
        "--scale",
        "32",
    ];
    let report = replay_gpu(&gpt2, &args);
    let engine = report["engine_peak_reserved_bytes"].as_u64().unwrap();
    let live = report["peak_live_bytes"].as_u64().unwrap();
    assert!(engine >= live, "{report}");
    assert_ne!(
        report["peak_reserved_bytes"].as_u64(),
        Some(engine),
        "{report}"
    );
    // Without the cache (`reuse_cache:False`, and by default in fixed segments and under
    // `policy:pytorch`) the pool places every block as its engine alone.
    for conf in [
        "expandable_segments:False",
        "expandable_segments:False,reuse_cache:False",
        "policy:pytorch",
    ] {
        let report = replay_gpu(&gpt2, &["--conf", conf, "--scale", "32"]);
        assert_eq!(
            report["peak_reserved_bytes"], report["engine_peak_reserved_bytes"],
            "{conf}: {report}"
        );
    }
    // The text report gives both, over peak live.
    let output = Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .arg("replay")
        .arg(&gpt2)
        .args(["--gpu"])
        .args(args)
        .env_remove("WGPOOL_CONF")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    let expected = format!(
        "reserved / live    {:.4} (the engine alone on this device: {:.4})",
        report["ratio"].as_f64().unwrap(),
        engine as f64 / live as f64
    );
    assert!(text.contains(&expected), "{expected}\n{text}");
}

#[test]
fn the_owner_bias_changes_no_figure_of_a_replay() {
    let trace = trace_file();
    for conf in ["expandable_segments:False", "expandable_segments:auto"] {
        let args = [
            "--conf",
            conf,
            "--scale",
            "4",
            "--repeat",
            "2",
            "--keep-cache",
        ];
        let biased = replay_gpu(&trace, &args);
        let plain = replay_gpu(&trace, &[&args[..], &["--no-owner-bias"]].concat());
        assert_eq!(plain["owner_bias"], false, "{plain}");
        // The replaying thread is the pool's only one: the bias holds to the end wherever
        // the system has membarrier (Linux 4.14 and later without a filter against it).
        assert!(biased["owner_bias"].is_boolean(), "{biased}");
        for key in [
            "mode",
            "peak_live_bytes",
            "peak_reserved_bytes",
            "peak_allocated_bytes",
            "device_memory_peak_bytes",
            "device_allocations",
            "bind_calls",
            "segments_created",
            "segments_released",
            "num_ooms",
        ] {
            assert_eq!(biased[key], plain[key], "{key}: {biased} against {plain}");
        }
    }
    let _ = std::fs::remove_file(&trace);
}

#[test]
fn scale_needs_gpu_and_a_positive_divisor() {
    let trace =
        std::env::temp_dir().join(format!("wgpool-replay-gpu-s-{}.csv", std::process::id()));
    std::fs::write(&trace, "action,id,size,stream\nalloc,1,4096,0\n").unwrap();
    for args in [
        vec!["--scale", "2"],
        vec!["--gpu", "--scale", "0"],
        vec!["--repeat", "2"],
        vec!["--gpu", "--repeat", "0"],
    ] {
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

/// `wgpool replay TRACE --gpu` with `extra`, `WGPOOL_CONF` unset: its exit code and
/// standard error.
fn replay_gpu_status(trace: &PathBuf, extra: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .arg("replay")
        .arg(trace)
        .arg("--gpu")
        .args(extra)
        .env_remove("WGPOOL_CONF")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let code = output.status.code().expect("exited, not killed");
    (code, stderr)
}

/// A trace file of `rows` (after the header) in the temporary directory.
fn rows_file(name: &str, rows: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "wgpool-replay-gpu-{name}-{}.csv",
        std::process::id()
    ));
    std::fs::write(&path, format!("action,id,size,stream\n{rows}")).unwrap();
    path
}

/// Issue 25: `large_segment_size_mb` one MiB below the device's largest range, at it (rounded
/// up to whole MiB) and above it. Under `policy:pytorch` in pages mode it is the large page,
/// and on lavapipe (largest range 2 GiB less 4 KiB) 2048 once made a range of 2^31 bytes,
/// one above `max_buffer_size`: the replay exited 1 with "invalid page operation". A page
/// above the largest range is now clamped to it.
#[test]
fn a_large_page_at_or_above_the_largest_range_is_clamped_to_it() {
    let gpu = common::gpu();
    let paged = wgpool::gpu::sparse::PagedMemory::new(
        gpu.device(),
        gpu.queue(),
        wgpool::pool::DEFAULT_USAGE,
        "probe",
        Default::default(),
    )
    .expect("the test adapter maps pages (lavapipe from Mesa 25)");
    let largest = paged.max_range();
    let heap = paged.sparse().facts().heap_size;
    drop(paged);
    let trace = rows_file("large-page", "alloc,1,41943040,0\nalloc,2,41943040,0\n");
    let at = largest.div_ceil(MIB);
    for mb in [at - 1, at, at + 1] {
        let conf = format!("policy:pytorch,expandable_segments:True,large_segment_size_mb:{mb}");
        let report = replay_gpu(&trace, &["--conf", &conf]);
        assert_eq!(report["mode"], "pages", "{conf}: {report}");
        let reserved = report["peak_reserved_bytes"].as_u64().unwrap();
        assert!(reserved <= largest, "{conf}: {report}");
        // Where two such pages fit the device, the one page holds both allocations.
        if 2 * largest <= heap {
            assert_eq!(report["num_ooms"], 0, "{conf}: {report}");
            assert_eq!(reserved, (mb * MIB).min(largest), "{conf}: {report}");
        }
    }
    let _ = std::fs::remove_file(&trace);
}

/// Issue 25: a request above the largest block the device serves exits 2 (it exited 1), in
/// both memory modes, and the message names the size and the device's limit, as
/// `Pool::max_block_size` gives it.
fn a_request_above_the_device_limit_exits_2_naming_the_size_and_the_limit(conf: &str) {
    let gpu = common::gpu();
    let size = (gpu.limits().max_buffer_size + 1).min(1 << 42);
    let name = format!("too-large-{}", conf.len());
    let trace = rows_file(&name, &format!("alloc,1,{size},0\nfree,1,{size},0\n"));
    {
        let config = wgpool::config::Config::parse(conf).unwrap();
        let limit = wgpool::pool::Pool::new(gpu.device(), gpu.queue(), config)
            .unwrap()
            .max_block_size();
        assert!(size > limit);
        let (code, stderr) = replay_gpu_status(&trace, &["--conf", conf], &[]);
        assert_eq!(code, 2, "{conf}: {stderr}");
        assert!(
            stderr.contains(&format!("({size} bytes)")),
            "{conf}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("({limit} bytes")),
            "{conf}: {stderr}"
        );
        assert!(
            stderr.contains("line 2") && stderr.contains("--scale"),
            "{stderr}"
        );
    }
    // The same trace fits once scaled down.
    let scale = size.div_ceil(64 * MIB).to_string();
    let (code, stderr) = replay_gpu_status(&trace, &["--scale", &scale], &[]);
    assert_eq!(code, 0, "{stderr}");
    let _ = std::fs::remove_file(&trace);
}

#[test]
fn a_request_above_the_device_limit_exits_2_naming_the_size_and_the_limit_on_fixed_segments() {
    a_request_above_the_device_limit_exits_2_naming_the_size_and_the_limit(
        "expandable_segments:False",
    );
}

#[test]
fn a_request_above_the_device_limit_exits_2_naming_the_size_and_the_limit_on_pages() {
    a_request_above_the_device_limit_exits_2_naming_the_size_and_the_limit(
        "expandable_segments:True",
    );
}

/// The device is chosen by the user's environment: a `WGPU_BACKEND` naming no backend is
/// bad input (exit 2), as in `bench`.
#[test]
fn a_bad_backend_exits_2() {
    let trace = rows_file("backend", "alloc,1,4096,0\n");
    let (code, stderr) = replay_gpu_status(&trace, &[], &[("WGPU_BACKEND", "bogus")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("WGPU_BACKEND"), "{stderr}");
    let _ = std::fs::remove_file(&trace);
}
