//! Evicting ahead of need (issue 22): with a headroom, a pool with residency keeps that much
//! of its device budget free at submission points, copying the least recently used blocks
//! out at one point and unmapping them at the next; a block used in between stays on the
//! device with what was written to it; data survives passes over more than the budget.
//!
//! Runs on lavapipe 25 with blocks of 2 MiB, as `residency_gpu` does.

mod common;

use common::{gpu, pattern_bytes};
use wgpool::config::Config;
use wgpool::kernels::{KernelCall, Kernels};
use wgpool::pool::{Block, Pool, PoolOptions, ResidencyOptions};

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 2 * MIB;

fn pool_with(budget: u64, headroom: u64) -> Pool {
    let ctx = gpu();
    let residency = ResidencyOptions::new()
        .with_device_budget(budget)
        .with_headroom(headroom);
    assert_eq!(residency.headroom(), headroom);
    Pool::with_options(
        ctx.device(),
        ctx.queue(),
        Config::parse("").unwrap(),
        PoolOptions::default().with_residency(residency),
    )
    .expect("a pool in pages mode with residency (lavapipe >= 25: run scripts/setup-vulkan)")
}

fn fill(pool: &Pool, kernels: &Kernels, block: &Block, seed: u32) {
    kernels
        .run(&KernelCall::fill_pattern(block.operand(), seed))
        .expect("fill");
    pool.mark_submitted();
}

fn assert_pattern(pool: &Pool, block: &Block, seed: u32, what: &str) {
    let got = pool.read(block).expect("read");
    assert!(
        got == pattern_bytes(seed, block.size()),
        "{what}: the block lost its contents"
    );
}

#[test]
fn passes_over_twice_the_budget_keep_the_headroom_free_and_the_data() {
    let budget = 8 * BLOCK;
    let headroom = 2 * BLOCK;
    let pool = pool_with(budget, headroom);
    let kernels = Kernels::new(pool.device(), pool.queue());
    let blocks: Vec<Block> = (0..16).map(|_| pool.alloc(BLOCK).unwrap()).collect();
    let mut seeds = vec![0u32; blocks.len()];
    for pass in 0..3u32 {
        for (i, block) in blocks.iter().enumerate() {
            seeds[i] = pass * 100 + i as u32;
            fill(&pool, &kernels, block, seeds[i]);
            assert!(pool.memory_reserved() <= budget);
        }
    }
    // Two submission points with nothing used in between: the blocks chosen at the first
    // are unmapped at the second, and the headroom is free.
    pool.mark_submitted();
    pool.mark_submitted();
    let free = budget - pool.memory_reserved();
    assert!(
        free >= headroom,
        "{free} bytes free, the headroom is {headroom}"
    );
    let stats = pool.residency_stats().unwrap();
    assert!(stats.ahead_evictions > 0, "{stats:?}");
    assert!(stats.ahead_evictions <= stats.evictions, "{stats:?}");
    for (i, block) in blocks.iter().enumerate() {
        assert_pattern(&pool, block, seeds[i], &format!("block {i}"));
    }
}

#[test]
fn a_block_used_after_it_was_chosen_stays_with_what_was_written() {
    // The pool keeps one block free, and chooses ahead so that one more comes free at the
    // next point.
    let budget = 6 * BLOCK;
    let pool = pool_with(budget, BLOCK);
    let kernels = Kernels::new(pool.device(), pool.queue());
    let blocks: Vec<Block> = (0..6).map(|_| pool.alloc(BLOCK).unwrap()).collect();
    for (i, block) in blocks.iter().enumerate() {
        fill(&pool, &kernels, block, i as u32);
    }
    // Two points with nothing used between: the blocks chosen are unmapped, the headroom
    // is free, and nothing is pending.
    pool.mark_submitted();
    pool.mark_submitted();
    let resident: Vec<usize> = (0..6).filter(|&i| pool.is_resident(&blocks[i])).collect();
    assert_eq!(
        resident,
        vec![2, 3, 4, 5],
        "the two least recently used went ahead of need"
    );
    // Block 0 comes back into the headroom; at the point after it, the least recently used
    // block, 2, is chosen and its copy submitted. Block 2 is written before the next point:
    // it must not be unmapped with its old copy.
    fill(&pool, &kernels, &blocks[0], 50);
    fill(&pool, &kernels, &blocks[2], 99);
    assert!(
        pool.is_resident(&blocks[2]),
        "a block used since it was chosen stays on the device"
    );
    pool.mark_submitted();
    assert!(
        !pool.is_resident(&blocks[3]),
        "block 3 was chosen next and went"
    );
    let stats = pool.residency_stats().unwrap();
    assert!(stats.ahead_evictions >= 1, "{stats:?}");
    assert_pattern(
        &pool,
        &blocks[2],
        99,
        "the block written after it was chosen",
    );
    // Evicted by hand after that, its contents are the new ones too.
    pool.mark_submitted();
    let _ = pool.evict(&blocks[2]);
    assert_pattern(&pool, &blocks[2], 99, "block 2 after an eviction");
    for (i, seed) in [(0, 50), (1, 1), (3, 3), (4, 4), (5, 5)] {
        assert_pattern(&pool, &blocks[i], seed, &format!("block {i}"));
    }
}
