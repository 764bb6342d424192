//! `wgpool replay`: the built binary run on small hand-made traces whose figures can be
//! worked out by hand from PyTorch's rules.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

const MIB: u64 = 1 << 20;

/// A trace file in the temporary directory, removed on drop.
struct TraceFile(PathBuf);

impl TraceFile {
    fn new(rows: &str) -> TraceFile {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "wgpool-replay-cli-{}-{}.csv",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, format!("action,id,size,stream\n{rows}")).unwrap();
        TraceFile(path)
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `wgpool replay` with WGPOOL_CONF unset unless `env_conf` gives it.
fn wgpool(args: &[&str], env_conf: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wgpool"));
    command.args(args).env_remove("WGPOOL_CONF");
    if let Some(conf) = env_conf {
        command.env("WGPOOL_CONF", conf);
    }
    command.output().expect("the wgpool binary runs")
}

fn replay_json(trace: &TraceFile, conf: Option<&str>, extra: &[&str]) -> Value {
    let path = trace.0.to_str().unwrap();
    let mut args = vec!["replay", path, "--json"];
    if let Some(conf) = conf {
        args.extend(["--conf", conf]);
    }
    args.extend(extra);
    let out = wgpool(&args, None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "wgpool {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The whole of stdout is one JSON object.
    let value: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout}"));
    assert!(value.is_object(), "{value}");
    value
}

fn u(report: &Value, field: &str) -> u64 {
    report[field]
        .as_u64()
        .unwrap_or_else(|| panic!("`{field}` is not an unsigned integer in {report}"))
}

fn f(report: &Value, field: &str) -> f64 {
    report[field]
        .as_f64()
        .unwrap_or_else(|| panic!("`{field}` is not a number in {report}"))
}

/// Exit code 2, nothing on stdout, and a message on stderr; returns the message.
fn bad_input(args: &[&str], env_conf: Option<&str>) -> String {
    let out = wgpool(args, env_conf);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "wgpool {args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "wgpool {args:?} printed to stdout");
    assert!(!stderr.trim().is_empty());
    stderr
}

#[test]
fn one_small_allocation_reserves_one_small_segment() {
    let trace = TraceFile::new("alloc,1,1000,0\n");
    let report = replay_json(&trace, Some("policy:pytorch"), &[]);
    for field in [
        "ops",
        "peak_live_bytes",
        "peak_reserved_bytes",
        "ratio",
        "segments_created",
        "segments_released",
        "segment_bytes_created",
        "ns_per_op",
    ] {
        assert!(
            report.get(field).is_some(),
            "`{field}` missing from {report}"
        );
    }
    assert_eq!(u(&report, "ops"), 1);
    assert_eq!(u(&report, "peak_live_bytes"), 1000);
    assert_eq!(u(&report, "peak_reserved_bytes"), 2 * MIB);
    assert!((f(&report, "ratio") - 2097.152).abs() < 1e-9, "{report}");
    assert_eq!(u(&report, "segments_created"), 1);
    assert_eq!(u(&report, "segments_released"), 0);
    assert_eq!(u(&report, "segment_bytes_created"), 2 * MIB);
    assert!(f(&report, "ns_per_op") >= 0.0);
    assert_eq!(report["policy"], "pytorch");
}

/// 3 MiB gets a 20 MiB segment, 1000 B a 2 MiB one; after the 3 MiB block is freed, 5 MiB
/// fits the cached 20 MiB block. Live peaks at 5 MiB + 1000 B.
const MIXED: &str = "alloc,1,3145728,0\nalloc,2,1000,0\nfree,1,3145728,0\nalloc,3,5242880,0\nfree,2,1000,0\nfree,3,5242880,0\n";

#[test]
fn cached_blocks_are_reused_under_pytorch_policy() {
    let trace = TraceFile::new(MIXED);
    let report = replay_json(&trace, Some("policy:pytorch"), &[]);
    assert_eq!(u(&report, "ops"), 6);
    assert_eq!(u(&report, "peak_live_bytes"), 5 * MIB + 1000);
    assert_eq!(u(&report, "peak_reserved_bytes"), 22 * MIB);
    assert_eq!(u(&report, "segments_created"), 2);
    assert_eq!(u(&report, "segments_released"), 0);
    assert_eq!(u(&report, "segment_bytes_created"), 22 * MIB);
    let ratio = (22 * MIB) as f64 / (5 * MIB + 1000) as f64;
    assert!((f(&report, "ratio") - ratio).abs() < 1e-9, "{report}");
}

#[test]
fn passthrough_backend_creates_and_releases_a_segment_per_allocation() {
    let trace = TraceFile::new(MIXED);
    let report = replay_json(&trace, Some("policy:pytorch,backend:passthrough"), &[]);
    assert_eq!(u(&report, "segments_created"), 3);
    assert_eq!(u(&report, "segments_released"), 3);
    assert_eq!(
        u(&report, "segment_bytes_created"),
        3 * MIB + 1024 + 5 * MIB
    );
    // Highest after the 5 MiB allocation: 1024 B + 5 MiB.
    assert_eq!(u(&report, "peak_reserved_bytes"), 5 * MIB + 1024);
    assert_eq!(u(&report, "peak_live_bytes"), 5 * MIB + 1000);
}

/// A pass that leaves its 1000 B block allocated; PyTorch's rules give it a 20 MiB and a
/// 2 MiB segment.
const LEAVES_ONE: &str = "alloc,1,3145728,0\nalloc,2,1000,0\nfree,1,3145728,0\n";

#[test]
fn passes_run_the_trace_in_a_loop_with_the_cache_kept() {
    let trace = TraceFile::new(LEAVES_ONE);
    let report = replay_json(&trace, Some("policy:pytorch"), &["--passes", "3"]);
    assert_eq!(u(&report, "passes"), 3);
    assert_eq!(u(&report, "ops"), 9);
    // What a pass leaves is freed at its end: live memory peaks as in one pass (without
    // the frees the second pass would peak 1000 B higher).
    assert_eq!(u(&report, "peak_live_bytes"), 3 * MIB + 1000);
    // The cache is kept: the later passes reuse the first pass's two segments.
    assert_eq!(u(&report, "segments_created"), 2);
    assert_eq!(u(&report, "segments_released"), 0);
    assert_eq!(u(&report, "peak_reserved_bytes"), 22 * MIB);
    let one = replay_json(&trace, Some("policy:pytorch"), &[]);
    assert_eq!((u(&one, "passes"), u(&one, "ops")), (1, 3));
    let out = wgpool(
        &[
            "replay",
            trace.0.to_str().unwrap(),
            "--passes",
            "3",
            "--conf",
            "policy:pytorch",
        ],
        None,
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("9 (3 passes of 3)"), "{text}");
}

#[test]
fn passes_refuse_zero_the_oracle_and_the_gpu() {
    let trace = TraceFile::new(LEAVES_ONE);
    let path = trace.0.to_str().unwrap();
    for (extra, says) in [
        (&["--passes", "0"][..], "--passes"),
        (&["--passes", "100001"][..], "--passes"),
        (&["--passes", "2", "--oracle"][..], "--oracle"),
        (&["--passes", "2", "--gpu"][..], "--gpu"),
    ] {
        let mut args = vec!["replay", path];
        args.extend(extra);
        let message = bad_input(&args, None);
        assert!(message.contains(says), "{args:?}: {message}");
    }
}

#[test]
fn wgpool_conf_is_read_when_conf_is_absent_and_conf_overrides_it() {
    let trace = TraceFile::new(MIXED);
    let path = trace.0.to_str().unwrap();
    let out = wgpool(
        &["replay", path, "--json"],
        Some("policy:pytorch,backend:passthrough"),
    );
    assert!(out.status.success());
    let from_env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(u(&from_env, "segments_created"), 3);
    let out = wgpool(
        &["replay", path, "--json", "--conf", "policy:pytorch"],
        Some("backend:passthrough"),
    );
    assert!(out.status.success());
    let overridden: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(u(&overridden, "segments_created"), 2);
    // A bad WGPOOL_CONF is refused like a bad --conf.
    let stderr = bad_input(&["replay", path, "--json"], Some("no_such_option:1"));
    assert!(stderr.contains("no_such_option"), "{stderr}");
}

#[test]
fn zero_byte_allocations_hold_no_memory() {
    let trace = TraceFile::new("alloc,1,0,0\nfree,1,0,0\n");
    let report = replay_json(&trace, Some("policy:pytorch"), &[]);
    assert_eq!(u(&report, "ops"), 2);
    assert_eq!(u(&report, "peak_live_bytes"), 0);
    assert_eq!(u(&report, "peak_reserved_bytes"), 0);
    assert_eq!(u(&report, "segments_created"), 0);
    assert_eq!(f(&report, "ratio"), 0.0);
}

#[test]
fn a_cap_from_the_device_size_makes_allocations_fail_and_replay_continue() {
    // Cap 0.5 * 100 MiB: the second 40 MiB block does not fit; its free is skipped.
    let trace = TraceFile::new(
        "alloc,1,41943040,0\nalloc,2,41943040,0\nfree,2,41943040,0\nfree,1,41943040,0\n",
    );
    let conf = "policy:pytorch,per_process_memory_fraction:0.5";
    let report = replay_json(&trace, Some(conf), &["--device-memory-mb", "100"]);
    assert_eq!(u(&report, "num_ooms"), 1);
    assert_eq!(u(&report, "peak_live_bytes"), 40 * MIB);
    assert_eq!(u(&report, "peak_reserved_bytes"), 40 * MIB);
    // Without a device size the fraction has nothing to apply to.
    let path = trace.0.to_str().unwrap();
    let stderr = bad_input(&["replay", path, "--conf", conf], None);
    assert!(stderr.contains("memory_limit_mb"), "{stderr}");
}

#[test]
fn the_text_report_has_the_same_figures() {
    let trace = TraceFile::new("alloc,1,1000,0\n");
    let path = trace.0.to_str().unwrap();
    let out = wgpool(&["replay", path, "--conf", "policy:pytorch"], None);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("policy:pytorch"), "{text}");
    assert!(
        text.contains("(2097152 B)"),
        "peak reserved missing: {text}"
    );
    assert!(text.contains("(1000 B)"), "peak live missing: {text}");
}

#[test]
fn malformed_rows_exit_2_naming_the_line() {
    for (rows, line, part) in [
        ("alloc,1,1000,0\nalloc,2,ten,0\n", 3, "`size` is `ten`"),
        ("alloc,1,1000\n", 2, "missing the `stream` field"),
        (
            "alloc,1,1000,0\nalloc,2,5,0\nmalloc,3,5,0\n",
            4,
            "unknown action",
        ),
        ("alloc,1,1000,0,7\n", 2, "too many fields"),
        ("alloc,1,-4,0\n", 2, "`size` is `-4`"),
        ("alloc,1,1000,0\nalloc,1,1000,0\n", 3, "allocated again"),
    ] {
        let trace = TraceFile::new(rows);
        let stderr = bad_input(&["replay", trace.0.to_str().unwrap(), "--json"], None);
        assert!(
            stderr.contains(&format!("line {line}")),
            "{rows:?}: {stderr}"
        );
        assert!(stderr.contains(part), "{rows:?}: {stderr}");
    }
}

#[test]
fn a_free_of_an_id_that_is_not_live_exits_2_naming_the_line() {
    for (rows, line) in [
        ("alloc,1,1000,0\nfree,2,1000,0\n", 3),
        ("alloc,1,1000,0\nfree,1,1000,0\nfree,1,1000,0\n", 4),
    ] {
        let trace = TraceFile::new(rows);
        let stderr = bad_input(&["replay", trace.0.to_str().unwrap()], None);
        assert!(
            stderr.contains(&format!("line {line}")),
            "{rows:?}: {stderr}"
        );
        assert!(stderr.contains("not live"), "{rows:?}: {stderr}");
    }
}

#[test]
fn a_bad_conf_exits_2_naming_the_key() {
    let trace = TraceFile::new("alloc,1,1000,0\n");
    let path = trace.0.to_str().unwrap();
    for (conf, parts) in [
        (
            "max_split_mb:128",
            &["max_split_mb", "max_split_size_mb"][..],
        ),
        (
            "max_split_size_mb:1",
            &["max_split_size_mb", "minimum of 20", "2097151"][..],
        ),
        (
            "expandable_segments:maybe",
            &["expandable_segments", "auto"][..],
        ),
        (
            "policy:pytorch,policy:pytorch",
            &["policy", "more than once"][..],
        ),
        ("roundup_power2_divisions:[256:1", &["never closed"][..]),
    ] {
        let stderr = bad_input(&["replay", path, "--json", "--conf", conf], None);
        for part in parts {
            assert!(stderr.contains(part), "`{conf}`: `{stderr}` lacks {part}");
        }
    }
}

#[test]
fn a_missing_file_exits_2_naming_it() {
    let path = std::env::temp_dir().join("wgpool-replay-cli-no-such-trace.csv");
    let path = path.to_str().unwrap();
    let stderr = bad_input(&["replay", path], None);
    assert!(stderr.contains(path), "{stderr}");
}

/// F5: a device size whose bytes do not fit 64 bits is refused, not wrapped to a cap of 0.
#[test]
fn a_device_size_beyond_64_bits_of_bytes_is_refused() {
    let trace = TraceFile::new("alloc,1,1000,0\n");
    let path = trace.0.to_str().unwrap();
    let stderr = bad_input(
        &[
            "replay",
            path,
            "--json",
            "--conf",
            "per_process_memory_fraction:0.5",
            "--device-memory-mb",
            "17592186044416",
        ],
        None,
    );
    assert!(
        stderr.contains("--device-memory-mb 17592186044416"),
        "{stderr}"
    );
    assert!(stderr.contains("at most 17592186044415 MiB"), "{stderr}");
    // The largest value that fits is taken.
    let report = replay_json(
        &trace,
        Some("per_process_memory_fraction:0.5"),
        &["--device-memory-mb", "17592186044415"],
    );
    assert_eq!(u(&report, "num_ooms"), 0);
}

/// Runs `wgpool` with `args` and its standard output a pipe whose reading end is closed at
/// once: before a replay (which runs for at least 200 ms) writes anything.
fn with_stdout_closed(args: &[&str]) -> Output {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .args(args)
        .env_remove("WGPOOL_CONF")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

/// F6: a reader that closes the pipe early ends the command quietly.
#[test]
fn a_closed_stdout_exits_quietly() {
    let trace = TraceFile::new(MIXED);
    let out = with_stdout_closed(&["replay", trace.0.to_str().unwrap(), "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// Issue 25: an output file that is a pipe whose reader closed it (`--snapshot /dev/stdout
/// | head -1`) ends the command quietly too, as standard output does; it exited 1 with
/// "Broken pipe".
#[test]
fn an_output_file_on_a_closed_pipe_exits_quietly() {
    let trace = TraceFile::new(MIXED);
    for option in ["--snapshot", "--plot"] {
        let out = with_stdout_closed(&["replay", trace.0.to_str().unwrap(), option, "/dev/stdout"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{option}: {stderr}");
        assert!(stderr.is_empty(), "{option}: {stderr}");
    }
    // A file that cannot be written at all is refused before the run, naming the file
    // (`an_unwritable_output_file_is_refused_before_the_run`).
    let stderr = bad_input(
        &[
            "replay",
            trace.0.to_str().unwrap(),
            "--snapshot",
            "/nonexistent-wgpool-dir/s.pickle",
        ],
        None,
    );
    assert!(
        stderr.contains("/nonexistent-wgpool-dir/s.pickle"),
        "{stderr}"
    );
}

/// F7: a 100 MB field, or an endless input, gives a short error, not a huge line or an
/// exhausted memory.
#[test]
fn huge_fields_and_endless_inputs_give_short_errors() {
    let trace = TraceFile::new(&format!("alloc,1,{},0\n", "7".repeat(100 << 20)));
    let stderr = bad_input(&["replay", trace.0.to_str().unwrap()], None);
    assert!(stderr.len() < 500, "{} bytes of error", stderr.len());
    assert!(stderr.contains("line 2"), "{stderr}");
    if std::path::Path::new("/dev/zero").exists() {
        let stderr = bad_input(&["replay", "/dev/zero"], None);
        assert!(stderr.len() < 500, "{} bytes of error", stderr.len());
        assert!(stderr.contains("longer than"), "{stderr}");
    }
    // A limit on the whole input.
    let rows = "alloc,1,1000,0\nfree,1,1000,0\n".repeat(40_000);
    let trace = TraceFile::new(&rows);
    let stderr = bad_input(
        &["replay", trace.0.to_str().unwrap(), "--max-input-mb", "1"],
        None,
    );
    assert!(stderr.contains("limit of 1048576 bytes"), "{stderr}");
}

/// F8: a byte-order mark and lone-CR line endings are a valid trace.
#[test]
fn byte_order_marks_and_lone_cr_line_endings_are_accepted() {
    let path =
        std::env::temp_dir().join(format!("wgpool-replay-cli-{}-bom.csv", std::process::id()));
    std::fs::write(
        &path,
        "\u{feff}action,id,size,stream\ralloc,1,1000,0\rfree,1,1000,0\r",
    )
    .unwrap();
    let trace = TraceFile(path);
    let report = replay_json(&trace, Some("policy:pytorch"), &[]);
    assert_eq!(u(&report, "ops"), 2);
    assert_eq!(u(&report, "peak_reserved_bytes"), 2 * MIB);
}

/// Issue 25: one leading byte-order mark is skipped, as UTF-8 readers do; a second one is
/// part of the first field, and the message shows it escaped (it was quoted invisibly, as
/// "unknown action `alloc`").
#[test]
fn a_second_byte_order_mark_is_quoted_escaped() {
    let path =
        std::env::temp_dir().join(format!("wgpool-replay-cli-{}-bom2.csv", std::process::id()));
    std::fs::write(&path, "\u{feff}\u{feff}alloc,1,1000,0\nfree,1,1000,0\n").unwrap();
    let trace = TraceFile(path);
    let stderr = bad_input(&["replay", trace.0.to_str().unwrap()], None);
    assert!(
        stderr.contains("unknown action `\\u{feff}alloc`"),
        "{stderr}"
    );
    assert!(stderr.contains("line 1"), "{stderr}");
    assert!(!stderr.contains('\u{feff}'), "{stderr}");
    // One mark, without a header: the trace replays.
    std::fs::write(&trace.0, "\u{feff}alloc,1,1000,0\nfree,1,1000,0\n").unwrap();
    let report = replay_json(&trace, Some("policy:pytorch"), &[]);
    assert_eq!(u(&report, "ops"), 2);
}

/// Issue 25: without a GPU the engine models an H200's 1 TiB ranges; a large page above
/// that (`large_segment_size_mb:1048577`) is clamped to it, where it failed with "range of
/// ... is not a multiple of 65536 B up to 1099511627776 B", which named no option.
#[test]
fn a_large_page_above_the_modelled_range_is_clamped_to_it() {
    let trace = TraceFile::new("alloc,1,41943040,0\nalloc,2,41943040,0\n");
    for mb in ["1048576", "1048577", "2097151"] {
        let conf = format!("policy:pytorch,expandable_segments:True,large_segment_size_mb:{mb}");
        let report = replay_json(&trace, Some(&conf), &[]);
        assert_eq!(u(&report, "num_ooms"), 0, "{conf}");
        assert_eq!(u(&report, "peak_reserved_bytes"), 1 << 40, "{conf}");
    }
}

/// F9: replay has no device, so a too-large request names the engine's limit (in pages
/// mode, the address range the modelled device reserves).
#[test]
fn a_too_large_request_in_replay_names_the_engine_limit() {
    let trace = TraceFile::new("alloc,1,4398046511104,0\n");
    for (conf, limit) in [
        ("expandable_segments:False", "engine's largest segment"),
        ("", "largest address range"),
    ] {
        let stderr = bad_input(&["replay", trace.0.to_str().unwrap(), "--conf", conf], None);
        assert!(!stderr.contains("max_buffer_size"), "{stderr}");
        assert!(stderr.contains(limit), "`{conf}`: {stderr}");
        assert!(stderr.contains("line 2"), "{stderr}");
    }
}

#[test]
fn a_pytorch_snapshot_replays_from_the_command_line() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/torch-snapshot-small.pickle"
    );
    let out = wgpool(
        &["replay", path, "--json", "--conf", "policy:pytorch"],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["format"], "pytorch-snapshot");
    assert_eq!(u(&report, "ops"), 6);
    // Live peak: 1 MiB + 3000 + 1000 before the 1 MiB free, then 3000 + 1000 + 5 MiB.
    assert_eq!(u(&report, "peak_live_bytes"), 5 * MIB + 4000);
}

#[test]
fn oracle_and_stats_flags_report_pytorchs_view() {
    // Two 1000 B blocks at the base of one 2 MiB segment and 1024 B above it, as PyTorch
    // places them; then a block PyTorch put at the base again after both were freed.
    let base = 140_000_000_000_000u64;
    let trace = TraceFile::new(&format!(
        "alloc,{base},1000,0\nalloc,{},1000,0\nfree,{base},1000,0\nfree,{},1000,0\n\
         alloc,{base},1000,0\n",
        base + 1024,
        base + 1024
    ));
    let v = replay_json(&trace, Some("policy:pytorch"), &["--oracle", "--stats"]);
    assert_eq!(v["oracle"]["checked"], 3);
    assert_eq!(v["oracle"]["divergences"], 0);
    assert!(v["oracle"]["first_divergence_line"].is_null());
    let stats = v["memory_stats"].as_object().unwrap();
    assert_eq!(stats.len(), 122, "every key of torch.cuda.memory_stats()");
    assert_eq!(stats["reserved_bytes.all.current"], 2 * MIB);
    assert_eq!(stats["allocation.small_pool.allocated"], 3);
    assert_eq!(stats["max_split_size"], -1);
    assert_eq!(stats["num_sync_all_streams"], 0);
    // PyTorch reusing the upper block instead is a divergence on line 6.
    let moved = TraceFile::new(&format!(
        "alloc,{base},1000,0\nalloc,{},1000,0\nfree,{base},1000,0\nfree,{},1000,0\n\
         alloc,{},1000,0\n",
        base + 1024,
        base + 1024,
        base + 1024
    ));
    let v = replay_json(&moved, Some("policy:pytorch"), &["--oracle"]);
    assert_eq!(v["oracle"]["divergences"], 1);
    assert_eq!(v["oracle"]["first_divergence_line"], 6);
    assert_eq!(v["oracle"]["expected"]["address"], base + 1024);
    assert_eq!(v["oracle"]["got"]["address"], base);
    assert!(v.get("memory_stats").is_none());
}

#[test]
fn device_memory_bytes_is_accepted_and_conflicts_with_mib() {
    // An H200's 150109880320 B is not a whole number of MiB; PyTorch's cap is
    // size_t(fraction * double(total)).
    let trace = TraceFile::new("alloc,1,1000,0\n");
    let fraction = 0.04075918533115249f64;
    let conf = format!("policy:pytorch,per_process_memory_fraction:{fraction}");
    let v = replay_json(
        &trace,
        Some(&conf),
        &["--stats", "--device-memory-bytes", "150109880320"],
    );
    assert_eq!(v["memory_stats"]["reserved_bytes.all.current"], 2 * MIB);
    let out = wgpool(
        &[
            "replay",
            trace.0.to_str().unwrap(),
            "--device-memory-bytes",
            "1",
            "--device-memory-mb",
            "1",
        ],
        None,
    );
    assert!(!out.status.success(), "the two sizes conflict");
}

#[test]
fn compare_runs_pytorch_native_expandable_and_the_default_in_one_table() {
    let trace = TraceFile::new(MIXED);
    let path = trace.0.to_str().unwrap();
    let out = wgpool(
        &[
            "replay",
            path,
            "--compare",
            "--json",
            "--conf",
            "backend:passthrough",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = c["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "PyTorch native",
            "PyTorch expandable segments",
            "wgpool default",
            "yours"
        ]
    );
    // Native PyTorch: the 3 MiB block's 20 MiB segment serves the 5 MiB request.
    assert_eq!(u(&rows[0]["report"], "peak_reserved_bytes"), 22 * MIB);
    assert_eq!(rows[0]["conf"], "policy:pytorch");
    // Each row has a report or says why it could not run.
    for row in rows {
        assert_ne!(row["report"].is_null(), row["error"].is_null(), "{row}");
    }
    assert_eq!(u(&rows[3]["report"], "segments_released"), 3);
    // The table has a line per configuration.
    let out = wgpool(&["replay", path, "--compare"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "PyTorch native",
        "PyTorch expandable segments",
        "wgpool default",
    ] {
        assert!(text.contains(name), "{text}");
    }
    assert!(!text.contains("yours"), "no --conf, no extra row: {text}");
    // --compare runs several configurations: it takes no single-run outputs.
    let stderr = bad_input(&["replay", path, "--compare", "--plot", "x.svg"], None);
    assert!(stderr.contains("--plot"), "{stderr}");
}

/// Issue 24, item 6: a trace with `oom` rows replayed with no cap serves them; the replay
/// says so, and says that a device size alone sets no cap. With a cap, neither warning.
#[test]
fn refused_allocations_without_a_cap_and_a_device_size_alone_are_warned_about() {
    let trace = TraceFile::new("alloc,1,1000,0\noom,0,99857989632,0\nfree,1,0,0\n");
    let path = trace.0.to_str().unwrap();
    let stderr = |args: &[&str]| {
        let out = wgpool(args, None);
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let uncapped = stderr(&["replay", path, "--json"]);
    assert!(
        uncapped
            .contains("warning: the trace records 1 allocation the recording allocator refused")
            && uncapped.contains("no cap"),
        "{uncapped}"
    );
    let size_alone = stderr(&["replay", path, "--json", "--device-memory-mb", "1000"]);
    assert!(
        size_alone.contains("--device-memory-mb / --device-memory-bytes only give the device size")
            && size_alone.contains("per_process_memory_fraction:1"),
        "{size_alone}"
    );
    let capped = stderr(&[
        "replay",
        path,
        "--json",
        "--device-memory-mb",
        "1000",
        "--conf",
        "per_process_memory_fraction:1",
    ]);
    assert!(!capped.contains("warning"), "{capped}");
    let report = replay_json(
        &trace,
        Some("per_process_memory_fraction:1"),
        &["--device-memory-mb", "1000"],
    );
    assert_eq!(report["num_ooms"], 1);
}

/// `--trace-device` chooses among a snapshot's devices; given with a CSV trace, which
/// records one device, the replay runs the whole trace and says the option did nothing.
#[test]
fn a_trace_device_for_a_csv_trace_is_warned_about() {
    let trace = TraceFile::new("alloc,1,1000,0\nfree,1,0,0\n");
    let path = trace.0.to_str().unwrap();
    let out = wgpool(&["replay", path, "--json", "--trace-device", "2"], None);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: --trace-device 2 chooses a device of a PyTorch snapshot")
            && stderr.contains("wgpool-csv"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ops"], 2);
    let without = wgpool(&["replay", path, "--json"], None);
    assert!(!String::from_utf8_lossy(&without.stderr).contains("warning"));
}

/// An output file that cannot be written is refused before the replay or the benchmark
/// runs (exit 2, nothing on standard output), not after it, which would lose the run.
#[test]
fn an_unwritable_output_file_is_refused_before_the_run() {
    let trace = TraceFile::new("alloc,1,1000,0\nfree,1,0,0\n");
    let path = trace.0.to_str().unwrap();
    let missing = std::env::temp_dir().join("wgpool-no-such-directory/out.svg");
    let missing = missing.to_str().unwrap();
    let directory = std::env::temp_dir();
    let directory = directory.to_str().unwrap();
    for (args, part) in [
        (vec!["replay", path, "--plot", missing], "--plot"),
        (
            vec!["replay", path, "--json", "--snapshot", directory],
            "it is a directory",
        ),
        (vec!["bench", "--quick", "--plot", missing], "--plot"),
    ] {
        let stderr = bad_input(&args, None);
        assert!(
            stderr.contains("cannot write there") && stderr.contains(part),
            "{args:?}: {stderr}"
        );
    }
    // A new file, and an existing one, are left as the run writes them, not as the check
    // did (it creates and removes a new file, and opens an existing one to append nothing).
    let fresh = std::env::temp_dir().join(format!("wgpool-plot-{}.svg", std::process::id()));
    for existing in [false, true] {
        if existing {
            std::fs::write(&fresh, "old contents").unwrap();
        }
        let out = wgpool(&["replay", path, "--plot", fresh.to_str().unwrap()], None);
        assert!(out.status.success());
        let svg = std::fs::read_to_string(&fresh).unwrap();
        std::fs::remove_file(&fresh).unwrap();
        assert!(
            svg.starts_with("<svg") || svg.starts_with("<?xml"),
            "{}",
            &svg[..40.min(svg.len())]
        );
        assert!(!svg.contains("old contents"));
    }
}

/// A FIFO as the output file: the check before the run leaves it alone (opening it would
/// wait for its reader, and closing it would end the reader's input), and the snapshot
/// reaches the reader whole.
#[cfg(unix)]
#[test]
fn a_fifo_output_file_gets_the_whole_snapshot() {
    let trace = TraceFile::new(MIXED);
    let fifo = std::env::temp_dir().join(format!("wgpool-fifo-{}", std::process::id()));
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).expect("read the FIFO"))
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .args(["replay", trace.0.to_str().unwrap(), "--json", "--snapshot"])
        .arg(&fifo)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run wgpool");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            // The reader thread, if still waiting, ends with the test process.
            panic!("wgpool did not finish writing to the FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let bytes = reader.join().unwrap();
    std::fs::remove_file(&fifo).unwrap();
    assert!(status.success());
    assert_eq!(bytes.first(), Some(&0x80), "a pickle starts with PROTO");
    assert!(bytes.len() > 100, "{} bytes", bytes.len());
}
