//! `wgpool replay --snapshot`: the pickle has PyTorch's `_dump_snapshot` layout (checked
//! with Python's own pickle module by tools/check_snapshot.py, including the consistency
//! PyTorch's memory viewer relies on), and wgpool reads it back as a trace.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A file in the temporary directory, removed on drop.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Temp {
        Temp(
            std::env::temp_dir().join(format!("wgpool-snapshot-cli-{}-{name}", std::process::id())),
        )
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn wgpool(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .args(args)
        .env_remove("WGPOOL_CONF")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "wgpool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A random trace of `n` operations with sizes from 512 B to 64 MiB on two streams.
fn random_trace(n: usize, seed: u64) -> String {
    let mut state = seed;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let mut rows = String::from("action,id,size,stream\n");
    let mut live: Vec<u64> = Vec::new();
    let mut id = 0;
    for _ in 0..n {
        if live.is_empty() || next() % 3 != 0 {
            id += 1;
            let size = 512 + ((next() % (64 << 20)) >> (next() % 12));
            rows.push_str(&format!("alloc,{id},{size},{}\n", next() % 2));
            live.push(id);
        } else {
            let victim = live.swap_remove((next() as usize) % live.len());
            rows.push_str(&format!("free,{victim},0,0\n"));
        }
    }
    rows
}

fn check_with_python(pickle: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/check_snapshot.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(pickle)
        .output()
        .expect("python3 runs (CI installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check_snapshot.py failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ok   structure"), "{stdout}");
    assert!(stdout.contains("ok   MemoryViz simulation"), "{stdout}");
}

/// Runs the Python `program` with `file` as its argument, checks that it succeeded, and
/// returns what it printed.
fn python_on(file: &str, program: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", program, file])
        .output()
        .expect("python3 runs (CI installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_replay_snapshot_has_pytorchs_layout_and_replays_back() {
    let trace = Temp::new("trace.csv");
    std::fs::write(&trace.0, random_trace(3000, 7)).unwrap();
    for conf in ["policy:pytorch", "", "policy:pytorch,backend:passthrough"] {
        let snapshot = Temp::new("replay.pickle");
        let mut args = vec![
            "replay",
            trace.path(),
            "--json",
            "--snapshot",
            snapshot.path(),
        ];
        if !conf.is_empty() {
            args.extend(["--conf", conf]);
        }
        let first = json(&wgpool(&args));
        check_with_python(snapshot.path());
        // The snapshot read back is the same workload: same live peak, same operations.
        let back = json(&wgpool(&[
            "replay",
            snapshot.path(),
            "--json",
            "--conf",
            "policy:pytorch",
        ]));
        assert_eq!(back["format"], "pytorch-snapshot");
        assert_eq!(back["peak_live_bytes"], first["peak_live_bytes"], "{conf}");
        assert_eq!(back["ops"], first["ops"], "{conf}");
    }
}

#[test]
fn a_bounded_history_still_gives_a_consistent_snapshot() {
    let trace = Temp::new("bounded.csv");
    std::fs::write(&trace.0, random_trace(2000, 11)).unwrap();
    let snapshot = Temp::new("bounded.pickle");
    wgpool(&[
        "replay",
        trace.path(),
        "--snapshot",
        snapshot.path(),
        "--history-entries",
        "100",
    ]);
    check_with_python(snapshot.path());
    // The older events were dropped; what is before them replays as pre-existing blocks.
    let back = json(&wgpool(&["replay", snapshot.path(), "--json"]));
    assert!(back["ops"].as_u64().unwrap() < 2000, "{back}");
}

#[test]
fn out_of_memory_is_recorded_as_pytorch_does() {
    let trace = Temp::new("oom.csv");
    std::fs::write(
        &trace.0,
        "alloc,1,41943040,0\nalloc,2,41943040,0\nfree,1,0,0\n",
    )
    .unwrap();
    let snapshot = Temp::new("oom.pickle");
    wgpool(&[
        "replay",
        trace.path(),
        "--conf",
        "policy:pytorch,memory_limit_mb:50",
        "--snapshot",
        snapshot.path(),
    ]);
    check_with_python(snapshot.path());
    let events = python_on(
        snapshot.path(),
        "import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); \
         print([(e['action'], e['size']) for e in d['device_traces'][0]])",
    );
    assert_eq!(
        events.trim(),
        "[('segment_alloc', 41943040), ('alloc', 41943040), ('oom', 41943040), \
         ('free_requested', 41943040), ('free_completed', 41943040)]"
    );
}

#[test]
fn the_checker_accepts_a_snapshot_written_by_pytorch() {
    check_with_python(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/torch-2.11-mlp-small.pickle"
    ));
}

/// The checker can fail: a block freed after its pages were unmapped is refused, and the
/// same history in the right order (pages of an expandable segment) passes.
#[test]
fn the_checker_refuses_a_block_outside_live_memory() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/check_snapshot.py");
    let make = |order: &str, name: &str| {
        let file = Temp::new(name);
        let program = format!(
            "import pickle, sys\n\
             P = 2 << 20; S = 0x7f0000000000\n\
             ev = lambda a, addr, size: dict(action=a, addr=addr, size=size, stream=0, time_us=0, frames=[])\n\
             events = dict(map=ev('segment_map', S, 2 * P), alloc=ev('alloc', S + P, 1000),\n\
                           free=ev('free_completed', S + P, 1000), unmap=ev('segment_unmap', S + P, P))\n\
             seg = dict(device=0, address=S, total_size=P, allocated_size=0, active_size=0,\n\
                        requested_size=0, stream=0, segment_type='large', is_expandable=True,\n\
                        frames=[], blocks=[dict(size=P, requested_size=0, state='inactive', frames=[])])\n\
             pickle.dump(dict(segments=[seg], device_traces=[[events[k] for k in '{order}'.split()]]),\n\
                         open(sys.argv[1], 'wb'))\n"
        );
        python_on(file.path(), &program);
        let out = Command::new("python3")
            .arg(&script)
            .arg(file.path())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (good, text) = make("map alloc free unmap", "good.pickle");
    assert!(good, "{text}");
    let (bad, text) = make("map alloc unmap free", "bad.pickle");
    assert!(!bad, "{text}");
    assert!(text.contains("FAIL"), "{text}");
}

/// An address range is reported as PyTorch reports an expandable segment: one segment per
/// run of mapped memory, not the whole reserved address space. On the GPT-2 trace under
/// PyTorch's expandable segments the two segments are exactly those of PyTorch 2.11's own
/// snapshot after the same trace on an H200 (8,703,180,800 B large, 8,388,608 B small).
#[test]
fn page_mapped_ranges_appear_as_their_mapped_runs() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gpt2-train.csv");
    let snapshot = Temp::new("pages.pickle");
    wgpool(&[
        "replay",
        trace,
        "--conf",
        "policy:pytorch,expandable_segments:True",
        "--snapshot",
        snapshot.path(),
    ]);
    check_with_python(snapshot.path());
    let segments = python_on(
        snapshot.path(),
        "import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); \
         print(sorted((s['segment_type'], s['total_size'], s['is_expandable'], \
         sum(b['size'] for b in s['blocks'])) for s in d['segments']))",
    );
    assert_eq!(
        segments.trim(),
        "[('large', 8703180800, True, 8703180800), ('small', 8388608, True, 8388608)]"
    );
}
