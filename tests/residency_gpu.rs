//! Residency on the GPU (issue 22): a pool in pages mode over its device budget evicts the
//! least recently used blocks to host memory and brings them back on use, with their
//! addresses and contents; pins hold blocks on the device; the host limit ends in a clear
//! error with nothing lost; threads submitting at once never see a block mid-move.
//!
//! Runs on lavapipe 25 with blocks of 2 MiB and budgets of a few blocks: the default policy
//! maps large segments in 512 KiB pages, and a block gives back the whole pages inside it.

mod common;

use std::sync::Arc;

use common::{gpu, pattern_bytes};
use wgpool::config::Config;
use wgpool::engine::AllocError;
use wgpool::history::{Action, EVICTED, RESTORED, Timeline};
use wgpool::kernels::{Dtype, KernelCall, KernelError, Kernels};
use wgpool::pool::{
    BindingError, Block, BlockBindings, MemoryMode, Pool, PoolError, PoolOptions, ResidencyError,
    ResidencyOptions,
};

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
    let pool = Pool::with_options(
        ctx.device(),
        ctx.queue(),
        Config::parse("").unwrap(),
        PoolOptions::default().with_residency(residency),
    )
    .expect("a pool in pages mode with residency (lavapipe >= 25: run scripts/setup-vulkan)");
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    pool
}

/// Fills `block` with the pattern of `seed` through a kernel, then reaches a submission
/// point.
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
fn blocks_over_the_budget_keep_their_contents_and_addresses() {
    let budget = 8 * MIB;
    let pool = pool_with(budget, None);
    let kernels = Kernels::new(pool.device(), pool.queue());
    let mut blocks = Vec::new();
    for i in 0..12u32 {
        let block = pool.alloc(BLOCK).expect("alloc evicts to make room");
        fill(&pool, &kernels, &block, 100 + i);
        assert!(
            pool.memory_reserved() <= budget,
            "reserved {} over the budget {budget}",
            pool.memory_reserved()
        );
        blocks.push(block);
    }
    let stats = pool.residency_stats().expect("residency is on");
    assert_eq!(stats.budget_bytes, budget);
    assert_eq!(stats.tracked_blocks, 12);
    assert!(stats.evictions >= 6, "{stats:?}");
    assert!(stats.evicted_bytes >= 6 * OWN, "{stats:?}");
    assert!(
        !pool.is_resident(&blocks[0]),
        "the oldest block was evicted"
    );
    // Taking `buffer()` would count as a use: the segment and offset name the place.
    let places: Vec<_> = blocks.iter().map(|b| (b.segment(), b.offset())).collect();
    for (i, block) in blocks.iter().enumerate() {
        assert_pattern(&pool, block, 100 + i as u32, &format!("block {i}"));
        assert!(pool.memory_reserved() <= budget);
    }
    let after: Vec<_> = blocks.iter().map(|b| (b.segment(), b.offset())).collect();
    assert_eq!(places, after, "blocks keep their range and offset");
    let stats = pool.residency_stats().unwrap();
    assert!(stats.restores >= 6, "{stats:?}");
    assert_eq!(
        pool.memory_stats().num_ooms,
        0,
        "eviction served every request"
    );
    let summary = pool.memory_summary();
    assert!(summary.contains("residency: budget 8.00 MiB"), "{summary}");
    drop(blocks);
    let stats = pool.residency_stats().unwrap();
    assert_eq!((stats.tracked_blocks, stats.evicted_bytes), (0, 0));
    assert_eq!(
        pool.host_memory_stats()
            .unwrap()
            .allocated_bytes
            .all
            .current,
        0,
        "freeing evicted blocks frees their copies"
    );
}

#[test]
fn least_recently_used_blocks_go_first_and_pinned_ones_stay() {
    let pool = pool_with(4 * BLOCK + MIB, None);
    let kernels = Kernels::new(pool.device(), pool.queue());
    let blocks: Vec<Block> = (0..4)
        .map(|i| {
            let block = pool.alloc(BLOCK).unwrap();
            fill(&pool, &kernels, &block, i);
            block
        })
        .collect();
    assert_eq!(pool.residency_stats().unwrap().evictions, 0);
    // Used in the order 2, 0, 3, 1: block 2 is now the least recently used.
    for i in [2, 0, 3, 1] {
        pool.make_resident(&[&blocks[i]]).unwrap();
    }
    pool.pin(&blocks[2]).unwrap();
    let fifth = pool.alloc(BLOCK).unwrap();
    let evicted: Vec<usize> = (0..4).filter(|&i| !pool.is_resident(&blocks[i])).collect();
    assert_eq!(evicted, vec![0], "block 2 is pinned, so block 0 goes");
    assert!(matches!(pool.evict(&blocks[2]), Err(ResidencyError::InUse)));
    pool.unpin(&blocks[2]).unwrap();
    let evicted_now = pool.evict(&blocks[2]).unwrap();
    assert!(evicted_now >= OWN, "{evicted_now}");
    assert!(!pool.is_resident(&blocks[2]));
    for (i, block) in blocks.iter().enumerate() {
        assert_pattern(&pool, block, i as u32, &format!("block {i}"));
    }
    drop(fifth);
    // A block smaller than a page stays on the device.
    let small = pool.alloc(1000).unwrap();
    assert!(matches!(pool.pin(&small), Err(ResidencyError::NotTracked)));
}

#[test]
fn blocks_named_by_unsubmitted_recordings_are_not_evicted() {
    let pool = pool_with(2 * BLOCK + MIB, None);
    let a = pool.alloc(BLOCK).unwrap();
    let b = pool.alloc(BLOCK).unwrap();
    // Both bound on this thread and not submitted: neither may go.
    let _ = a.binding().unwrap();
    let _ = b.binding().unwrap();
    let error = pool.alloc(BLOCK).unwrap_err();
    let AllocError::OutOfMemory(oom) = &error else {
        panic!("{error}");
    };
    let room = oom
        .residency
        .expect("the error says what residency could not evict");
    assert!(room.in_use >= 2 * OWN, "{room:?}");
    assert!(
        error
            .to_string()
            .contains("named by recordings not yet submitted")
    );
    assert_eq!(
        pool.memory_stats().num_ooms,
        1,
        "one request, one out-of-memory"
    );
    pool.mark_submitted();
    let c = pool
        .alloc(BLOCK)
        .expect("after the submission point a block may go");
    assert!(!pool.is_resident(&a) || !pool.is_resident(&b));
    drop(c);
}

#[test]
fn the_host_limit_ends_in_a_clear_error_and_nothing_is_lost() {
    let pool = pool_with(2 * BLOCK, Some(2 * BLOCK));
    let kernels = Kernels::new(pool.device(), pool.queue());
    let mut blocks = Vec::new();
    let error = loop {
        match pool.alloc(BLOCK) {
            Ok(block) => {
                fill(&pool, &kernels, &block, blocks.len() as u32);
                blocks.push(block);
            }
            Err(error) => break error,
        }
        assert!(blocks.len() < 16, "the host limit never stopped the pool");
    };
    let message = error.to_string();
    assert!(message.contains("host memory is full"), "{message}");
    assert!(message.contains("4.00 MiB"), "{message}");
    // Two blocks on the device and two copies on the host, at most.
    assert!((3..=4).contains(&blocks.len()), "{}", blocks.len());
    let last = blocks.len() - 1;
    assert!(matches!(
        pool.evict(&blocks[last]),
        Err(ResidencyError::HostLimit { .. })
    ));
    // Device and host are full: bringing an evicted block back needs room on the device,
    // which needs room on the host. The read fails, and says why.
    let evicted = (0..blocks.len())
        .find(|&i| !pool.is_resident(&blocks[i]))
        .expect("some block is evicted");
    let error = pool.read(&blocks[evicted]).unwrap_err();
    assert!(error.to_string().contains("host limit"), "{error}");
    // Nothing was lost: freeing a resident block makes room, and every block reads back.
    let resident = (0..blocks.len())
        .rev()
        .find(|&i| pool.is_resident(&blocks[i]))
        .expect("some block is resident");
    blocks.remove(resident);
    let seeds: Vec<u32> = (0..=last as u32)
        .filter(|&s| s != resident as u32)
        .collect();
    for (block, seed) in blocks.iter().zip(seeds) {
        assert_pattern(&pool, block, seed, &format!("block of seed {seed}"));
    }
}

#[test]
fn bind_groups_stay_valid_across_eviction() {
    let pool = pool_with(8 * MIB, None);
    let kernels = Kernels::new(pool.device(), pool.queue());
    let src = pool.alloc(BLOCK).unwrap();
    let dst = pool.alloc(BLOCK).unwrap();
    fill(&pool, &kernels, &src, 7);
    let copy = kernels
        .prepare(&KernelCall::copy(Dtype::U32, src.operand(), dst.operand()))
        .unwrap();
    pool.mark_submitted();
    pool.evict(&src).unwrap();
    pool.evict(&dst).unwrap();
    assert!(!pool.is_resident(&src) && !pool.is_resident(&dst));
    // Other blocks take the device memory the two gave back, and overwrite it.
    let others: Vec<Block> = (0..4)
        .map(|i| {
            let block = pool.alloc(BLOCK).unwrap();
            fill(&pool, &kernels, &block, 50 + i);
            block
        })
        .collect();
    // Recording the prepared kernel (its bind groups built before the eviction) brings both
    // blocks back at the same addresses.
    kernels.submit(&copy).unwrap();
    pool.mark_submitted();
    assert!(pool.is_resident(&src) && pool.is_resident(&dst));
    assert_pattern(&pool, &dst, 7, "the copy made after the restore");
    assert_pattern(&pool, &src, 7, "the restored source");
    for (i, block) in others.iter().enumerate() {
        assert_pattern(&pool, block, 50 + i as u32, &format!("other block {i}"));
    }
}

#[test]
fn four_threads_keep_their_data_over_a_thousand_evict_and_restore_cycles() {
    const THREADS: usize = 4;
    const BLOCKS: usize = 9;
    // Enough steps that a machine under load, where the threads interleave differently, also
    // makes over a thousand of each (320 steps once made 864 restores on a loaded machine).
    const STEPS: usize = 480;
    let block_size = BLOCK;
    // The blocks of all threads are twice the budget. No less: a block gives back only its
    // own pages, so the pages blocks share (up to one per block, 18 MiB here) always stay
    // mapped, and the blocks every thread's open recording names (two per thread, 12 MiB
    // of own pages) cannot be evicted; the budget must hold both, or a restore finds no room.
    let budget = (THREADS * BLOCKS) as u64 * block_size / 2;
    let pool = pool_with(budget, None);
    let kernels = Arc::new(Kernels::new(pool.device(), pool.queue()));
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let pool = pool.clone();
            let kernels = kernels.clone();
            scope.spawn(move || {
                let blocks: Vec<Block> = (0..BLOCKS)
                    .map(|_| pool.alloc(block_size).expect("alloc"))
                    .collect();
                // The seed of the pattern each block holds.
                let mut seeds: Vec<u32> = (0..BLOCKS).map(|i| (thread * 1000 + i) as u32).collect();
                for (block, &seed) in blocks.iter().zip(&seeds) {
                    fill(&pool, &kernels, block, seed);
                }
                let mut rng = thread as u64 * 0x9E37_79B9 + 1;
                for step in 0..STEPS {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let src = (rng % BLOCKS as u64) as usize;
                    let dst = (src + 1 + (rng >> 8) as usize % (BLOCKS - 1)) % BLOCKS;
                    if step % 7 == 0 {
                        let seed = (thread * 1000 + 100 + step) as u32;
                        fill(&pool, &kernels, &blocks[dst], seed);
                        seeds[dst] = seed;
                    } else {
                        let call = KernelCall::copy(
                            Dtype::U32,
                            blocks[src].operand(),
                            blocks[dst].operand(),
                        );
                        kernels.run(&call).expect("copy");
                        pool.mark_submitted();
                        seeds[dst] = seeds[src];
                    }
                }
                for (i, (block, &seed)) in blocks.iter().zip(&seeds).enumerate() {
                    assert_pattern(&pool, block, seed, &format!("thread {thread} block {i}"));
                }
            });
        }
    });
    let stats = pool.residency_stats().unwrap();
    assert!(stats.restores >= 1000, "{stats:?}");
    assert!(stats.evictions >= 1000, "{stats:?}");
    assert!(pool.max_memory_reserved() <= budget);
}

#[test]
fn evictions_and_restores_show_in_the_history_snapshot_and_timeline() {
    let pool = pool_with(4 * BLOCK + MIB, None);
    pool.record_history(Some(10_000));
    let kernels = Kernels::new(pool.device(), pool.queue());
    let blocks: Vec<Block> = (0..4)
        .map(|i| {
            let block = pool.alloc(BLOCK).unwrap();
            fill(&pool, &kernels, &block, i);
            block
        })
        .collect();
    let evicted = pool.evict(&blocks[1]).unwrap();
    let timeline = Timeline::of(&pool.history().unwrap(), 1000);
    assert_eq!(timeline.samples.last().unwrap().evicted, evicted);
    pool.make_resident(&[&blocks[1]]).unwrap();
    let history = pool.history().unwrap();
    let labels = |action: Action, label: &str| {
        history
            .events()
            .filter(|e| e.action == action && e.label.as_deref() == Some(label))
            .map(|e| e.size)
            .sum::<u64>()
    };
    assert_eq!(labels(Action::SegmentUnmap, EVICTED), evicted);
    assert_eq!(labels(Action::SegmentMap, RESTORED), evicted);
    let timeline = Timeline::of(&history, 1000);
    assert_eq!(timeline.samples.last().unwrap().evicted, 0);
    assert!(timeline.samples.iter().any(|s| s.evicted == evicted));
    // The snapshot names the moves in the events' frames, as PyTorch's viewer shows them.
    let snapshot = pool.torch_snapshot().unwrap();
    let named: Vec<&str> = snapshot
        .device_traces
        .iter()
        .flatten()
        .filter_map(|entry| entry.frames.first().map(|f| f.filename.as_str()))
        .collect();
    assert!(
        named.contains(&EVICTED) && named.contains(&RESTORED),
        "{named:?}"
    );
    for (i, block) in blocks.iter().enumerate() {
        assert_pattern(&pool, block, i as u32, &format!("block {i}"));
    }
}

/// Segment mode's stale-handle checks: a block moved by `offload` / `prefetch` changes buffer,
/// and what was built on its old place is refused, never recorded against memory that no
/// longer holds the block.
#[test]
fn bind_groups_and_kernels_built_before_a_move_are_refused_in_segments_mode() {
    let ctx = gpu();
    let pool = Pool::new(
        ctx.device(),
        ctx.queue(),
        Config::parse("expandable_segments:False").unwrap(),
    )
    .unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Segments);
    let kernels = Kernels::new(pool.device(), pool.queue());
    let mut block = pool.alloc(64 << 10).unwrap();
    fill(&pool, &kernels, &block, 7);
    let bindings = BlockBindings::new().read_write(0, &block);
    let layout = bindings
        .create_layout(pool.device(), wgpu::ShaderStages::COMPUTE)
        .unwrap();
    let group = bindings.create_bind_group(pool.device(), &layout).unwrap();
    let prepared = kernels
        .prepare(&KernelCall::fill_pattern(block.operand(), 9))
        .unwrap();
    pool.mark_submitted();
    assert!(!group.is_stale() && !prepared.is_stale());
    assert!(group.try_bind_group().is_ok());
    pool.mark_submitted();

    pool.offload(&mut block).unwrap();
    assert_eq!(block.generation(), 1);
    assert!(
        group.is_stale(),
        "the group binds the device place the block left"
    );
    let error = group.try_bind_group().unwrap_err();
    assert!(
        matches!(error, BindingError::Stale { generation: 0 }),
        "{error}"
    );
    assert!(
        error.to_string().contains("build the bind group again"),
        "{error}"
    );
    let error = kernels.submit(&prepared).unwrap_err();
    assert!(matches!(error, KernelError::Stale), "{error}");
    // Nothing ran: the block still holds its contents, at its new place.
    assert_pattern(&pool, &block, 7, "after the refused kernel");

    // Built again from the block, at its current place, they work.
    let fresh = BlockBindings::new()
        .read_write(0, &block)
        .create_bind_group(pool.device(), &layout)
        .unwrap();
    assert!(!fresh.is_stale());
    kernels
        .submit(
            &kernels
                .prepare(&KernelCall::fill_pattern(block.operand(), 11))
                .unwrap(),
        )
        .unwrap();
    pool.mark_submitted();
    pool.prefetch(&mut block).unwrap();
    assert_eq!(block.generation(), 2);
    assert!(fresh.is_stale(), "the host place is left too");
    assert_pattern(&pool, &block, 11, "after the round trip");
}

#[test]
fn residency_needs_a_page_mapped_pool() {
    let ctx = gpu();
    let error = Pool::with_options(
        ctx.device(),
        ctx.queue(),
        Config::parse("expandable_segments:False").unwrap(),
        PoolOptions::default().with_residency(ResidencyOptions::new()),
    )
    .unwrap_err();
    assert!(matches!(error, PoolError::ResidencyUnavailable { .. }));
    assert!(error.to_string().contains("Pool::offload"), "{error}");
    let pool = Pool::new(ctx.device(), ctx.queue(), Config::parse("").unwrap()).unwrap();
    let block = pool.alloc(BLOCK).unwrap();
    assert!(matches!(pool.pin(&block), Err(ResidencyError::Disabled)));
    assert!(pool.residency_stats().is_none());
}
