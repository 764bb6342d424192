//! The owner bias on a real adapter (lavapipe in CI): a pool used by one thread keeps the
//! bias through allocations, frees, reuse, writes and reads; the first use from another
//! thread revokes it for good; and nothing the pool reports or stores depends on it. The
//! concurrent stress of many threads on one pool (after the revocation) is `stress_gpu`.
//!
//! These tests need an adapter and fail, saying how to install one, when there is none.

mod common;

use common::pattern_bytes;
use wgpool::config::Config;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::pool::{MemoryMode, Pool, PoolOptions};

/// The statistics a run of the same operations must give with or without the bias.
fn figures(pool: &Pool) -> (u64, u64, u64, u64, u64) {
    let stats = pool.memory_stats();
    (
        stats.allocated_bytes.all.current,
        stats.allocated_bytes.all.peak,
        stats.allocation.all.allocated,
        stats.reserved_bytes.all.current,
        stats.num_device_alloc,
    )
}

/// Allocations, frees, reuse of the same size, a write and a read, on the calling thread.
fn work(pool: &Pool, seed: u32) -> Vec<wgpool::pool::Block> {
    let mut kept = Vec::new();
    for round in 0..40u64 {
        let block = pool.alloc(1000 + round * 512).unwrap();
        drop(pool.alloc(4096).unwrap());
        if round % 8 == 0 {
            let data = pattern_bytes(seed + round as u32, block.size());
            pool.write(&block, &data).unwrap();
            assert_eq!(pool.read(&block).unwrap(), data);
            kept.push(block);
        }
    }
    kept
}

#[test]
fn a_pool_keeps_its_bias_on_one_thread_and_gives_it_up_to_a_second() {
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    // The default maps pages where the device can (Mesa 25's lavapipe, NVIDIA).
    let default_mode = match own.page_mapping() {
        Ok(_) => MemoryMode::Pages,
        Err(_) => MemoryMode::Segments,
    };
    for (conf, mode) in [
        ("expandable_segments:False", MemoryMode::Segments),
        ("", default_mode),
    ] {
        let config = Config::parse(conf).unwrap();
        let biased = Pool::from_context(&own, config.clone()).unwrap();
        let plain = Pool::with_options(
            own.device(),
            own.queue(),
            config,
            PoolOptions::default().with_owner_bias(false),
        )
        .unwrap();
        assert_eq!(biased.memory_mode(), mode);
        assert!(!plain.owner_bias_holds(), "not asked for, never held");
        // Where the system has no membarrier (see PoolOptions::with_owner_bias) no pool is
        // biased; the figures and bytes below must then come out the same all the same.
        let fenced = biased.owner_bias_holds();
        if !fenced {
            eprintln!("membarrier is unavailable here: the pool's owner bias is off");
        }
        let kept_biased = work(&biased, 1);
        let kept_plain = work(&plain, 1);
        assert_eq!(
            biased.owner_bias_holds(),
            fenced,
            "one thread never revokes it"
        );
        assert_eq!(figures(&biased), figures(&plain), "{mode:?}: same figures");
        biased.check_consistency().unwrap();

        // A block dropped on another thread revokes the bias; the pool goes on correctly
        // on both threads after.
        let mut kept_biased = kept_biased.into_iter();
        let first = kept_biased.next().unwrap();
        let pool = biased.clone();
        let written = std::thread::spawn(move || {
            drop(first);
            let block = pool.alloc(3000).unwrap();
            let data = pattern_bytes(9, block.size());
            pool.write(&block, &data).unwrap();
            (block, data)
        })
        .join()
        .expect("the second thread");
        assert!(
            !biased.owner_bias_holds(),
            "another thread's use revoked it"
        );
        assert_eq!(biased.read(&written.0).unwrap(), written.1);
        let later = work(&biased, 2);
        assert!(!biased.owner_bias_holds(), "for good");
        drop((written, later, kept_biased, kept_plain));
        assert_eq!(biased.memory_stats().allocated_bytes.all.current, 0);
        biased.check_consistency().unwrap();
    }
}

#[test]
fn a_submission_point_on_another_thread_leaves_a_pool_without_held_blocks_biased() {
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let config = Config::parse("expandable_segments:False").unwrap();
    let mine = Pool::from_context(&own, config.clone()).unwrap();
    let kept = work(&mine, 3);
    let fenced = mine.owner_bias_holds();
    if !fenced {
        eprintln!("membarrier is unavailable here: the pool's owner bias is off");
    }
    // A second pool of the same device, used on another thread, holds a dropped block back
    // for its recording, then reaches a submission point: that releases held blocks in every
    // pool of the device that holds any.
    let theirs = Pool::from_context(&own, config).unwrap();
    let worker = theirs.clone();
    let (held, released) = std::thread::spawn(move || {
        let block = worker.alloc(8192).unwrap();
        let _ = block.binding();
        drop(block);
        let held = worker.held_bytes();
        worker.mark_submitted();
        (held, worker.held_bytes())
    })
    .join()
    .expect("the second thread");
    assert_eq!(held, 8192, "held back for the open recording");
    assert_eq!(released, 0, "released at the submission point");
    assert_eq!(
        mine.owner_bias_holds(),
        fenced,
        "a pool holding nothing back is not locked by another thread's submission point"
    );
    // And a pool that does hold a block back still gets it released by a submission point
    // on another thread (which then revokes its bias: it had to take its lock).
    let block = mine.alloc(4096).unwrap();
    let _ = block.binding();
    drop(block);
    assert_eq!(mine.held_bytes(), 4096);
    let worker = theirs.clone();
    std::thread::spawn(move || worker.mark_all_submitted())
        .join()
        .expect("the second thread");
    assert_eq!(mine.held_bytes(), 0, "released from the other thread");
    assert!(!mine.owner_bias_holds());
    drop(kept);
    assert_eq!(mine.memory_stats().allocated_bytes.all.current, 0);
    mine.check_consistency().unwrap();
    theirs.check_consistency().unwrap();
}
