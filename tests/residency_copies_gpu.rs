//! Residency's saved copies on the GPU (issue 22): a read-only block keeps the host copy it
//! was restored from, so evicting it again copies nothing; a discarded block moves no bytes
//! either way until it is used; kept copies give way when the host limit needs room; and
//! nothing is lost on the way.
//!
//! Runs on lavapipe 25 with blocks of 2 MiB and budgets of a few blocks, as
//! `residency_gpu` does.

mod common;

use common::{gpu, pattern_bytes};
use wgpool::config::Config;
use wgpool::kernels::{KernelCall, Kernels};
use wgpool::pool::{
    BindingError, Block, BlockBindings, Pool, PoolOptions, ReadWriteError, ResidencyError,
    ResidencyOptions, ResidencyStats,
};
use wgpool::staging::{StagingError, StagingOptions, StagingPool};

const MIB: u64 = 1 << 20;
/// A block: 2 MiB, of which at least 1.5 MiB (three pages) are its own.
const BLOCK: u64 = 2 * MIB;
/// The least a block's eviction gives back.
const OWN: u64 = 3 * MIB / 2;

fn pool_with(budget: u64, host_limit: Option<u64>) -> Pool {
    let ctx = gpu();
    let mut residency = ResidencyOptions::new().with_device_budget(budget);
    if let Some(limit) = host_limit {
        residency = residency.with_host_limit(limit);
    }
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

fn stats(pool: &Pool) -> ResidencyStats {
    pool.residency_stats().expect("residency is on")
}

fn host_bytes(pool: &Pool) -> u64 {
    pool.host_memory_stats()
        .map_or(0, |s| s.allocated_bytes.all.current)
}

#[test]
fn a_read_only_block_is_evicted_again_without_a_copy() {
    let pool = pool_with(4 * BLOCK, None);
    let kernels = Kernels::new(pool.device(), pool.queue());
    let weights = pool.alloc(BLOCK).unwrap();
    fill(&pool, &kernels, &weights, 7);
    pool.set_read_only(&weights, true).unwrap();
    assert!(pool.is_read_only(&weights));

    // The first eviction copies: there is no copy yet.
    let given_back = pool.evict(&weights).unwrap();
    assert!(given_back >= OWN, "{given_back}");
    let first = stats(&pool);
    assert_eq!(first.copied_out_bytes_total, given_back, "{first:?}");
    assert_eq!(first.read_only_blocks, 1);

    // The restore copies back and keeps the copy.
    pool.make_resident(&[&weights]).unwrap();
    let restored = stats(&pool);
    assert_eq!(restored.copied_in_bytes_total, given_back, "{restored:?}");
    assert_eq!(restored.kept_copy_bytes, given_back, "{restored:?}");

    // Every later eviction only unmaps, and the contents survive each round.
    for round in 0..3 {
        assert_eq!(pool.evict(&weights).unwrap(), given_back);
        assert!(!pool.is_resident(&weights));
        assert_pattern(&pool, &weights, 7, &format!("round {round}"));
    }
    let after = stats(&pool);
    assert_eq!(after.evictions, 4, "{after:?}");
    assert_eq!(after.evicted_bytes_total, 4 * given_back, "{after:?}");
    assert_eq!(
        after.copied_out_bytes_total, given_back,
        "only the first eviction copied: {after:?}"
    );
    assert_eq!(after.copied_in_bytes_total, 4 * given_back, "{after:?}");

    // The pool refuses to write a read-only block; taking the declaration back drops the
    // kept copy, and the block is written and moved as any other.
    let error = pool.write(&weights, &pattern_bytes(9, BLOCK)).unwrap_err();
    assert!(
        matches!(error, ReadWriteError::Residency(ResidencyError::ReadOnly)),
        "{error}"
    );
    assert!(error.to_string().contains("read-only"), "{error}");
    let staging = StagingPool::from_pool(&pool, StagingOptions::default()).unwrap();
    let refused = staging
        .upload(&weights, &pattern_bytes(9, BLOCK))
        .unwrap_err();
    assert!(
        matches!(refused, StagingError::ReadOnly { .. }),
        "{refused}"
    );
    // A bind group may read it, not write it.
    assert!(BlockBindings::new().read(0, &weights).check().is_ok());
    let bound = BlockBindings::new()
        .read_write(0, &weights)
        .check()
        .unwrap_err();
    assert!(matches!(bound, BindingError::ReadOnlyBlock), "{bound}");
    assert_pattern(&pool, &weights, 7, "after the refused writes");
    pool.set_read_only(&weights, false).unwrap();
    assert!(!pool.is_read_only(&weights));
    assert_eq!(stats(&pool).kept_copy_bytes, 0);
    assert_eq!(host_bytes(&pool), 0, "the kept copy was freed");
    pool.write(&weights, &pattern_bytes(9, BLOCK)).unwrap();
    pool.evict(&weights).unwrap();
    assert_eq!(
        stats(&pool).copied_out_bytes_total,
        2 * given_back,
        "a writable block is copied out"
    );
    assert_pattern(&pool, &weights, 9, "after the write");

    drop(weights);
    assert_eq!(host_bytes(&pool), 0, "freeing the block frees its copies");
}

#[test]
fn a_discarded_block_moves_no_bytes_until_it_is_used() {
    let pool = pool_with(4 * BLOCK, None);
    let kernels = Kernels::new(pool.device(), pool.queue());
    let output = pool.alloc(BLOCK).unwrap();
    fill(&pool, &kernels, &output, 1);
    let given_back = pool.evict(&output).unwrap();
    let evicted = stats(&pool);
    assert_eq!(evicted.copied_out_bytes_total, given_back);
    assert!(host_bytes(&pool) >= given_back);

    // Discarded while evicted: the copy is freed now and the restore copies nothing.
    pool.discard(&output).unwrap();
    assert_eq!(host_bytes(&pool), 0, "the discarded copy was freed");
    fill(&pool, &kernels, &output, 2);
    let refilled = stats(&pool);
    assert_eq!(refilled.restores, 1, "{refilled:?}");
    assert_eq!(refilled.copied_in_bytes_total, 0, "{refilled:?}");
    assert_pattern(&pool, &output, 2, "written after the restore");

    // Discarded on the device: its next eviction copies nothing.
    pool.discard(&output).unwrap();
    pool.evict(&output).unwrap();
    assert_eq!(stats(&pool).copied_out_bytes_total, given_back);
    assert_eq!(host_bytes(&pool), 0);

    // A use ends the declaration: written after a discard, the block is copied out again
    // and keeps what was written.
    fill(&pool, &kernels, &output, 3);
    pool.discard(&output).unwrap();
    fill(&pool, &kernels, &output, 4);
    pool.evict(&output).unwrap();
    assert_eq!(stats(&pool).copied_out_bytes_total, 2 * given_back);
    assert_pattern(&pool, &output, 4, "written after the discard");
}

#[test]
fn kept_copies_give_way_when_the_host_limit_needs_room() {
    // Room for three blocks on the device and two copies on the host.
    let pool = pool_with(3 * BLOCK, Some(2 * BLOCK));
    let kernels = Kernels::new(pool.device(), pool.queue());
    let mut weights = Vec::new();
    for seed in 0..2 {
        let block = pool.alloc(BLOCK).unwrap();
        fill(&pool, &kernels, &block, seed);
        pool.set_read_only(&block, true).unwrap();
        pool.evict(&block).unwrap();
        pool.make_resident(&[&block]).unwrap();
        // Pinned, so that the evictions below must copy writable blocks out.
        pool.pin(&block).unwrap();
        weights.push(block);
    }
    let kept = stats(&pool).kept_copy_bytes;
    assert!(kept >= 2 * OWN, "both copies kept: {kept}");

    // The host limit is full of kept copies. A writable block must be evicted for the
    // next one: its copy needs host room, and the kept copies make way rather than the
    // eviction failing.
    let first = pool.alloc(BLOCK).unwrap();
    fill(&pool, &kernels, &first, 10);
    let second = pool
        .alloc(BLOCK)
        .expect("a kept copy is dropped for the eviction's copy");
    fill(&pool, &kernels, &second, 11);
    assert!(!pool.is_resident(&first));
    let after = stats(&pool);
    assert!(after.kept_copy_bytes < kept, "{after:?}");
    assert_eq!(pool.memory_stats().num_ooms, 0);
    assert_pattern(&pool, &first, 10, "the evicted writable block");
    assert_pattern(&pool, &second, 11, "the other writable block");
    for (seed, block) in (0..).zip(&weights) {
        assert_pattern(&pool, block, seed, &format!("weights {seed}"));
        pool.unpin(block).unwrap();
    }
}

#[test]
fn the_declarations_refuse_what_they_cannot_apply_to() {
    let pool = pool_with(4 * BLOCK, None);
    let other = pool_with(4 * BLOCK, None);
    let foreign = other.alloc(BLOCK).unwrap();
    assert!(matches!(
        pool.set_read_only(&foreign, true),
        Err(ResidencyError::ForeignBlock)
    ));
    assert!(matches!(
        pool.discard(&foreign),
        Err(ResidencyError::ForeignBlock)
    ));
    assert!(!pool.is_read_only(&foreign));
    let small = pool.alloc(1000).unwrap();
    assert!(matches!(
        pool.set_read_only(&small, true),
        Err(ResidencyError::NotTracked)
    ));
    assert!(matches!(
        pool.discard(&small),
        Err(ResidencyError::NotTracked)
    ));

    let plain = Pool::new(gpu().device(), gpu().queue(), Config::parse("").unwrap())
        .expect("a pool without residency");
    let block = plain.alloc(BLOCK).unwrap();
    assert!(matches!(
        plain.set_read_only(&block, true),
        Err(ResidencyError::Disabled)
    ));
    assert!(matches!(
        plain.discard(&block),
        Err(ResidencyError::Disabled)
    ));
}
