//! Pages-mode blocks reached through several wgpu wrappers of their range: live blocks get
//! wrappers of their own, and bytes reused by a new block stay ordered with the work of
//! their previous occupant (the same wrapper, or all later GPU work ordered after all
//! submitted work). Needs a device that maps pages (lavapipe >= 25 in CI).

mod common;

use wgpool::config::Config;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::kernels::{KernelCall, Kernels};
use wgpool::pool::{Block, FreeTiming, MemoryMode, Pool, PoolOptions};

const BLOCK: u64 = 64 << 10;

fn pages_pool(free_timing: FreeTiming) -> Pool {
    pages_pool_on(common::gpu(), free_timing)
}

fn pages_pool_on(gpu: &GpuContext, free_timing: FreeTiming) -> Pool {
    let options = PoolOptions::default().with_free_timing(free_timing);
    let pool = Pool::with_options(
        gpu.device(),
        gpu.queue(),
        Config::parse("expandable_segments:True").unwrap(),
        options,
    )
    .unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    pool
}

fn words(pool: &Pool, block: &Block) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(&pool.read(block).unwrap())
}

/// Whether `block` overlaps `offset..offset + capacity` of its range.
fn overlaps(block: &Block, offset: u64, capacity: u64) -> bool {
    block.offset() < offset + capacity && offset < block.offset() + block.capacity()
}

/// Fills `block` with `word` in a pass of `encoder`.
fn record_fill(kernels: &Kernels, encoder: &mut wgpu::CommandEncoder, block: &Block, word: u32) {
    let prepared = kernels
        .prepare(&KernelCall::fill(block.operand(), word))
        .unwrap();
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
    prepared.record_in_pass(&mut pass);
}

#[test]
fn live_blocks_get_wrappers_of_their_own() {
    let pool = pages_pool(FreeTiming::AfterSubmit);
    let blocks: Vec<Block> = (0..12).map(|_| pool.alloc(BLOCK).unwrap()).collect();
    assert!(blocks.iter().all(|b| b.segment() == blocks[0].segment()));
    for (i, a) in blocks.iter().enumerate() {
        for b in &blocks[i + 1..] {
            assert_ne!(
                a.buffer(),
                b.buffer(),
                "blocks {a:?} and {b:?} share a wrapper"
            );
        }
    }
    // A dropped block's wrapper goes to the next block, not to a live one's.
    pool.mark_submitted();
    let idle = blocks[5].buffer().clone();
    let mut blocks = blocks;
    drop(blocks.remove(5));
    pool.mark_submitted();
    let next = pool.alloc_labeled(3 * BLOCK, "elsewhere").unwrap();
    assert_eq!(next.buffer(), &idle);
    assert!(blocks.iter().all(|b| b.buffer() != next.buffer()));
    assert_eq!(pool.device_memory_usage().wrapper_orderings, 0);
}

#[test]
fn reused_bytes_stay_ordered_across_wrappers() {
    let gpu = common::gpu();
    let pool = pages_pool(FreeTiming::AtDrop);
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let left = pool.alloc(BLOCK).unwrap();
    let a = pool.alloc_labeled(BLOCK, "a").unwrap();
    let right = pool.alloc(BLOCK).unwrap();
    let spare = pool.alloc(4 * BLOCK).unwrap();
    kernels
        .run(&KernelCall::fill(left.operand(), 0x1111_1111))
        .unwrap();
    kernels
        .run(&KernelCall::fill(right.operand(), 0x3333_3333))
        .unwrap();
    let (a_wrapper, a_offset, a_capacity) = (a.buffer().clone(), a.offset(), a.capacity());

    // A is written, freed before the encoder is submitted, and B on A's bytes is written in
    // the same encoder: B must come through A's wrapper, so that wgpu orders the two.
    let mut encoder = gpu.device().create_command_encoder(&Default::default());
    record_fill(&kernels, &mut encoder, &a, 0xAAAA_AAAA);
    drop(a);
    // The spare's wrapper becomes the most recently idle one: a pool that ignored A's
    // pending bytes would hand it to B.
    let spare_wrapper = spare.buffer().clone();
    drop(spare);
    let b = pool.alloc_labeled(BLOCK / 2, "b").unwrap();
    assert_ne!(spare_wrapper, a_wrapper);
    assert!(overlaps(&b, a_offset, a_capacity), "B reuses A's bytes");
    assert_eq!(b.buffer(), &a_wrapper, "B takes the wrapper A's work used");
    assert_ne!(b.buffer(), left.buffer());
    record_fill(&kernels, &mut encoder, &b, 0xBBBB_BBBB);
    pool.submit([encoder.finish()]);
    assert!(words(&pool, &b).iter().all(|&w| w == 0xBBBB_BBBB));

    // The next submission writes B again.
    kernels
        .run(&KernelCall::fill(b.operand(), 0xCCCC_CCCC))
        .unwrap();
    assert!(words(&pool, &b).iter().all(|&w| w == 0xCCCC_CCCC));
    assert!(words(&pool, &left).iter().all(|&w| w == 0x1111_1111));
    assert!(words(&pool, &right).iter().all(|&w| w == 0x3333_3333));
    let usage = pool.device_memory_usage();
    assert_eq!(usage.wrapper_orderings, 0);
    assert_eq!(usage.ordering_time, std::time::Duration::ZERO);
}

#[test]
fn bytes_of_several_wrappers_are_ordered_before_reuse() {
    let gpu = common::gpu();
    let pool = pages_pool(FreeTiming::AfterSubmit);
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let first = pool.alloc(BLOCK).unwrap();
    let second = pool.alloc(BLOCK).unwrap();
    let guard = pool.alloc(BLOCK).unwrap();
    assert_eq!(second.offset(), first.offset() + first.capacity());
    assert_ne!(first.buffer(), second.buffer());
    kernels
        .run(&KernelCall::fill(guard.operand(), 0x5A5A_5A5A))
        .unwrap();
    let mut encoder = gpu.device().create_command_encoder(&Default::default());
    record_fill(&kernels, &mut encoder, &first, 1);
    record_fill(&kernels, &mut encoder, &second, 2);
    let (start, span) = (first.offset(), 2 * BLOCK);
    drop((first, second));
    pool.submit([encoder.finish()]);

    // A block over both: reached through two wrappers, so the pool orders GPU work first.
    let both = pool.alloc_labeled(2 * BLOCK, "both").unwrap();
    assert!(overlaps(&both, start, span));
    let usage = pool.device_memory_usage();
    assert_eq!(usage.wrapper_orderings, 1);
    // The ordering's CPU time is counted apart from the driver's.
    assert!(usage.ordering_time > std::time::Duration::ZERO, "{usage:?}");
    kernels.run(&KernelCall::fill(both.operand(), 3)).unwrap();
    assert!(words(&pool, &both).iter().all(|&w| w == 3));
    assert!(words(&pool, &guard).iter().all(|&w| w == 0x5A5A_5A5A));

    // That settled every freed extent: reuse after it needs no further ordering.
    let freed_offset = both.offset();
    drop(both);
    pool.mark_submitted();
    let again = pool.alloc_labeled(BLOCK, "again").unwrap();
    assert!(overlaps(&again, freed_offset, span));
    assert_eq!(pool.device_memory_usage().wrapper_orderings, 1);
}

#[test]
fn wrappers_and_ranges_are_counted_and_timed_as_driver_work() {
    let pool = pages_pool(FreeTiming::AtDrop);
    let blocks: Vec<Block> = (0..3).map(|_| pool.alloc(BLOCK).unwrap()).collect();
    let usage = pool.device_memory_usage();
    // Three live blocks of one range: the range's own buffer and two more wrappers.
    assert!(blocks.windows(2).all(|w| w[0].buffer() != w[1].buffer()));
    assert_eq!(usage.ranges_created, 1, "{usage:?}");
    assert_eq!(usage.wrappers_created, 2, "{usage:?}");
    assert!(usage.range_time > std::time::Duration::ZERO, "{usage:?}");
    assert!(usage.driver_time >= usage.range_time + usage.bind_time + usage.allocation_time);
    assert_eq!(usage.ranges_released, 0);

    drop(blocks);
    pool.empty_cache();
    let after = pool.device_memory_usage();
    assert_eq!(after.ranges_released, 1, "{after:?}");
    assert_eq!(after.wrappers_created, 2);
    assert!(
        after.range_time > usage.range_time,
        "releasing is timed too: {after:?}"
    );
}

/// Four adjacent blocks of a fresh pool (the wrappers are not looked at: that would expose
/// them).
fn four_adjacent(pool: &Pool) -> Vec<Block> {
    let blocks: Vec<Block> = (0..4).map(|_| pool.alloc(BLOCK).unwrap()).collect();
    for pair in blocks.windows(2) {
        assert_eq!(pair[1].offset(), pair[0].offset() + pair[0].capacity());
        assert_eq!(pair[1].segment(), pair[0].segment());
    }
    blocks
}

/// Issue 21: bytes no GPU work reached need no ordering, however wrappers change over them
/// (a replay, or blocks only allocated and dropped).
#[test]
fn bytes_no_work_reached_are_reused_without_ordering() {
    let pool = pages_pool(FreeTiming::AfterSubmit);
    for round in 0..50 {
        let blocks = four_adjacent(&pool);
        let start = blocks[0].offset();
        drop(blocks);
        // Over all four: the bytes of four wrappers, none of them used.
        let over = pool.alloc_labeled(4 * BLOCK, "over").unwrap();
        assert!(overlaps(&over, start, 4 * BLOCK), "round {round}");
    }
    assert_eq!(pool.device_memory_usage().wrapper_orderings, 0);
}

/// Issue 21: an ordering settles all work submitted before it, also of bytes freed after
/// it; under `AtDrop`, with no submission points to go by, reusing such bytes across
/// wrappers orders again. Every block reads what was written last either way.
#[test]
fn an_ordering_settles_work_submitted_before_it_also_when_freed_later() {
    // On a device of its own: the work clock counts every submission point on the device,
    // and another test's submission between the ordering and the frees would (rightly) make
    // the freed bytes unsettled.
    let gpu = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    for (timing, expected) in [(FreeTiming::AfterSubmit, 1), (FreeTiming::AtDrop, 2)] {
        let pool = pages_pool_on(&gpu, timing);
        let mut blocks = four_adjacent(&pool);
        let start = blocks[0].offset();
        let mut encoder = gpu.device().create_command_encoder(&Default::default());
        for (i, block) in blocks.iter().enumerate() {
            record_fill(&kernels, &mut encoder, block, i as u32);
        }
        pool.submit([encoder.finish()]);
        let (c, d) = (blocks.pop().unwrap(), blocks.pop().unwrap());
        drop((c, d));
        let x = pool.alloc_labeled(2 * BLOCK, "x").unwrap();
        assert!(overlaps(&x, start + 2 * BLOCK, 2 * BLOCK));
        assert_eq!(pool.device_memory_usage().wrapper_orderings, 1);
        // A and B: work submitted before that ordering, freed after it.
        drop(blocks);
        let y = pool.alloc_labeled(2 * BLOCK, "y").unwrap();
        assert!(overlaps(&y, start, 2 * BLOCK));
        let usage = pool.device_memory_usage();
        assert_eq!(usage.wrapper_orderings, expected, "{timing:?}");
        let mut encoder = gpu.device().create_command_encoder(&Default::default());
        record_fill(&kernels, &mut encoder, &x, 0xF1F1_F1F1);
        record_fill(&kernels, &mut encoder, &y, 0xF2F2_F2F2);
        pool.submit([encoder.finish()]);
        assert!(words(&pool, &x).iter().all(|&w| w == 0xF1F1_F1F1));
        assert!(words(&pool, &y).iter().all(|&w| w == 0xF2F2_F2F2));
    }
}

/// Issue 21: the pool's own transfers count as work, submitted when they ran: bytes written
/// after an ordering are ordered again before reuse across wrappers.
#[test]
fn transfers_after_an_ordering_are_ordered_again() {
    let pool = pages_pool(FreeTiming::AfterSubmit);
    let blocks = four_adjacent(&pool);
    let start = blocks[0].offset();
    for (i, block) in blocks.iter().enumerate() {
        pool.write(block, &vec![i as u8; BLOCK as usize]).unwrap();
    }
    drop(blocks);
    let first = pool.alloc_labeled(2 * BLOCK, "first").unwrap();
    let second = pool.alloc_labeled(2 * BLOCK, "second").unwrap();
    assert!(overlaps(&first, start, 2 * BLOCK) && overlaps(&second, start + 2 * BLOCK, 2 * BLOCK));
    assert_eq!(pool.device_memory_usage().wrapper_orderings, 1);
    pool.write(&first, &vec![0xA1; 2 * BLOCK as usize]).unwrap();
    pool.write(&second, &vec![0xA2; 2 * BLOCK as usize])
        .unwrap();
    drop((first, second));
    let over = pool.alloc_labeled(4 * BLOCK, "over").unwrap();
    assert!(overlaps(&over, start, 4 * BLOCK));
    assert_eq!(pool.device_memory_usage().wrapper_orderings, 2);
    pool.write(&over, &vec![0xEE; 4 * BLOCK as usize]).unwrap();
    assert_eq!(pool.read(&over).unwrap(), vec![0xEE; 4 * BLOCK as usize]);
}

/// Issue 21: an unbind waits on the GPU for the work that used its pages, through an empty
/// submission that signals when all earlier work is done. Where no work on the pool's blocks
/// was submitted since the last such signal, the unbind waits for that one instead of
/// submitting another; under `AtDrop` every unbind call signals. On a device of its own:
/// the work clock counts every submission point on the device, other tests' included.
#[test]
fn unbinds_signal_again_only_after_new_work() {
    let gpu = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    for timing in [FreeTiming::AfterSubmit, FreeTiming::AtDrop] {
        let pool = pages_pool_on(&gpu, timing);
        // Five rounds of blocks that no work touched, each unmapped by empty_cache.
        for _ in 0..5 {
            drop(four_adjacent(&pool));
            pool.empty_cache();
        }
        let quiet = pool.device_memory_usage();
        // Each round unmaps its blocks' range, the unbinds queued (`page_bind_batch`) and
        // sent before the range's chunk is freed: a call per round at least.
        assert!(quiet.unmaps_queued >= 5, "{quiet:?}");
        assert!(quiet.bind_calls >= 5, "{quiet:?}");
        if timing == FreeTiming::AfterSubmit {
            assert!(quiet.unbind_signals <= 1, "{quiet:?}");
        } else {
            assert!(
                quiet.unbind_signals >= 5,
                "one per empty_cache at least: {quiet:?}"
            );
        }
        // Work on a block, submitted and declared so, before its pages are unmapped: the
        // next unbind signals again.
        let block = pool.alloc(BLOCK).unwrap();
        kernels.run(&KernelCall::fill(block.operand(), 7)).unwrap();
        drop(block);
        pool.mark_submitted();
        pool.empty_cache();
        let after = pool.device_memory_usage();
        assert_eq!(after.unbind_signals, quiet.unbind_signals + 1, "{after:?}");
        assert_eq!(pool.memory_reserved(), 0);
    }
}
