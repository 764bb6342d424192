//! A live pool's history as a PyTorch snapshot: `Pool::record_history` and
//! `Pool::torch_snapshot`, checked with tools/check_snapshot.py (Python's pickle module).

mod common;

use std::process::Command;

use wgpool::config::Config;
use wgpool::history::{Action, write_torch_snapshot};
use wgpool::pool::Pool;

#[test]
fn a_pool_records_its_history_as_a_pytorch_snapshot() {
    let gpu = common::gpu();
    let config = Config::parse("policy:pytorch,memory_limit_mb:64").unwrap();
    let pool = Pool::from_context(gpu, config).unwrap();
    assert!(pool.torch_snapshot().is_none(), "nothing recorded yet");
    let before = pool.alloc(1000).unwrap();
    pool.record_history(Some(100));
    let a = pool.alloc(3 << 20).unwrap();
    drop(a);
    // The same size again: with the history on, this goes through the engine, not the
    // reuse cache, and is an event.
    let b = pool.alloc(3 << 20).unwrap();
    assert!(pool.alloc(100 << 20).is_err(), "above the 64 MiB cap");
    drop(b);
    drop(before);
    pool.empty_cache();
    let actions: Vec<Action> = pool.history().unwrap().events().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [
            Action::SegmentAlloc,
            Action::Alloc,
            Action::FreeCompleted,
            Action::Alloc,
            Action::Oom,
            Action::FreeCompleted,
            Action::FreeCompleted,
            Action::SegmentFree,
            Action::SegmentFree,
        ]
    );
    let history = pool.history().unwrap();
    let events: Vec<_> = history.events().collect();
    // Sizes are the sizes asked for; times are microseconds since the epoch, in order.
    assert_eq!(events[1].size, 3 << 20);
    assert_eq!(events[6].size, 1000, "the block allocated before recording");
    assert!(events[0].time_us > 1_600_000_000_000_000);
    assert!(events.windows(2).all(|w| w[0].time_us <= w[1].time_us));

    let path =
        std::env::temp_dir().join(format!("wgpool-pool-history-{}.pickle", std::process::id()));
    write_torch_snapshot(&path, &pool.torch_snapshot().unwrap()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/check_snapshot.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ok   MemoryViz simulation"), "{stdout}");

    pool.record_history(None);
    assert!(pool.history().is_none());
    let c = pool.alloc(4096).unwrap();
    drop(c);
    pool.check_consistency().unwrap();
}
