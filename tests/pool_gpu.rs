//! The wgpu pool on a real adapter (lavapipe in CI): data integrity of blocks sharing a
//! segment, reuse after free in submission order, out-of-memory under a cap, empty_cache,
//! many threads, and bad input.
//!
//! These tests need an adapter and fail, saying how to install one, when there is none.

mod common;

use wgpool::config::Config;
use wgpool::engine::AllocError;
use wgpool::gpu::transfer::{read_region, write_region};
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::kernels::{Dtype, KernelCall, Kernels, pattern_word};
use wgpool::pool::{BindingError, Block, Pool, PoolError, PoolOptions};

fn pool(gpu: &GpuContext, conf: &str) -> Pool {
    Pool::from_context(gpu, Config::parse(conf).unwrap()).unwrap()
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(bytes)
}

const GUARD: u8 = 0x5A;

#[test]
fn blocks_sharing_a_segment_keep_their_own_bytes() {
    let gpu = common::gpu();
    let pool = pool(gpu, "policy:pytorch");
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    // Small-pool blocks of several sizes: all land in one 2 MiB segment.
    let sizes = [
        4096u64, 512, 1536, 8192, 1000, 65536, 2048, 512, 12288, 4096, 700, 16384,
    ];
    // Fill the segment with a guard first so that bytes outside blocks can be checked.
    let probe = pool.alloc(512).unwrap();
    let segment = probe.buffer().clone();
    write_region(
        gpu.device(),
        gpu.queue(),
        &segment,
        0,
        &vec![GUARD; segment.size() as usize],
    )
    .unwrap();
    drop(probe);
    let blocks: Vec<Block> = sizes.iter().map(|&s| pool.alloc(s).unwrap()).collect();
    assert!(
        blocks.iter().all(|b| b.buffer() == &segment),
        "all blocks share the first segment"
    );
    assert!(blocks.iter().any(|b| b.offset() > 0));
    for (seed, block) in blocks.iter().enumerate() {
        // Each kernel writes only the block's size rounded to 4 bytes.
        kernels
            .run(&KernelCall::fill_pattern(block.operand(), seed as u32 + 1))
            .unwrap();
    }
    let contents = read_region(gpu.device(), gpu.queue(), &segment, 0, segment.size()).unwrap();
    let mut covered = vec![false; contents.len()];
    for (seed, block) in blocks.iter().enumerate() {
        let start = block.offset() as usize;
        let bytes = &contents[start..start + block.bound_size() as usize];
        let expected: Vec<u32> = (0..block.bound_size() as u32 / 4)
            .map(|i| pattern_word(seed as u32 + 1, i))
            .collect();
        assert_eq!(
            words(bytes),
            expected,
            "block {seed} at offset {} holds another block's bytes",
            block.offset()
        );
        assert_eq!(pool.read(block).unwrap(), bytes[..block.size() as usize]);
        covered[start..start + block.bound_size() as usize].fill(true);
    }
    let stray = contents
        .iter()
        .zip(&covered)
        .position(|(&byte, &inside)| !inside && byte != GUARD);
    assert_eq!(stray, None, "a byte outside every block changed");
    pool.check_consistency().unwrap();
}

#[test]
fn reuse_after_free_follows_submission_order() {
    let gpu = common::gpu();
    let pool = pool(gpu, "policy:pytorch");
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let size = 256 << 10;
    let a = pool.alloc(size).unwrap();
    let out = pool.alloc(size).unwrap();
    let original: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    pool.write(&a, &original).unwrap();
    // Record a copy that reads A, submit it, and free A while it may still be running.
    let copy = kernels
        .prepare(&KernelCall::copy(Dtype::F32, a.operand(), out.operand()))
        .unwrap();
    kernels.submit(&copy).unwrap();
    let (buffer, offset) = (a.buffer().clone(), a.offset());
    drop(a);
    // The next block of the same size takes A's memory at once, and is overwritten.
    let b = pool.alloc(size).unwrap();
    assert_eq!(
        (b.buffer(), b.offset()),
        (&buffer, offset),
        "B reuses A's memory"
    );
    kernels
        .run(&KernelCall::fill(b.operand(), 0xDEAD_BEEF))
        .unwrap();
    assert_eq!(
        pool.read(&out).unwrap(),
        original,
        "the earlier dispatch saw A's data"
    );
    assert!(
        words(&pool.read(&b).unwrap())
            .iter()
            .all(|&w| w == 0xDEAD_BEEF)
    );
}

#[test]
fn out_of_memory_under_a_cap_is_an_error_and_the_pool_recovers() {
    let gpu = common::gpu();
    let pool = pool(gpu, "memory_limit_mb:64");
    let first = pool.alloc(40 << 20).unwrap();
    let error = pool.alloc(40 << 20).unwrap_err();
    let AllocError::OutOfMemory(oom) = &error else {
        panic!("expected out-of-memory, got {error}")
    };
    assert_eq!(oom.cap, Some(64 << 20));
    assert_eq!(oom.allocated, 40 << 20);
    let message = error.to_string();
    for needle in [
        "tried to allocate 40.00 MiB",
        "cap is 64.00 MiB",
        "40.00 MiB is allocated",
        "reserved by the pool but unallocated",
        "memory_limit_mb",
    ] {
        assert!(
            message.contains(needle),
            "message lacks `{needle}`: {message}"
        );
    }
    assert_eq!(pool.memory_stats().num_ooms, 1);
    pool.check_consistency().unwrap();
    drop(first);
    let second = pool
        .alloc(40 << 20)
        .expect("allocation succeeds once memory is freed");
    assert_eq!(pool.read(&second).unwrap().len(), 40 << 20);
    pool.check_consistency().unwrap();
}

#[test]
fn empty_cache_destroys_unused_segments() {
    // A device of its own: the test compares wgpu's device-wide allocator report.
    let gpu = common::own(|| {
        GpuContext::headless(&HeadlessOptions::default()).expect("the shared device's adapter")
    });
    let pool = pool(&gpu, "");
    let keep = pool.alloc(3 << 20).unwrap();
    let cached: Vec<Block> = (0..4).map(|_| pool.alloc(24 << 20).unwrap()).collect();
    let reserved_before = pool.memory_stats().reserved_bytes.all.current;
    let report_before = gpu.device().generate_allocator_report();
    drop(cached);
    assert_eq!(
        pool.memory_stats().reserved_bytes.all.current,
        reserved_before,
        "freed blocks stay cached"
    );
    pool.empty_cache();
    let stats = pool.memory_stats();
    let released = reserved_before - stats.reserved_bytes.all.current;
    assert_eq!(
        released,
        4 * (24 << 20),
        "the four unused 24 MiB segments are gone"
    );
    assert_eq!(stats.num_device_free, 4);
    assert_eq!(
        pool.read(&keep).unwrap().len(),
        3 << 20,
        "live blocks are untouched"
    );
    let report_after = gpu.device().generate_allocator_report();
    if gpu.info().backend == wgpu::Backend::Vulkan {
        assert!(
            report_before.is_some() && report_after.is_some(),
            "Vulkan has an allocator report"
        );
    }
    if let (Some(before), Some(after)) = (report_before, report_after) {
        assert!(
            before.total_allocated_bytes - after.total_allocated_bytes >= released,
            "wgpu's allocator report shows {} bytes released, the pool says {released}",
            before.total_allocated_bytes - after.total_allocated_bytes
        );
    }
    drop(keep);
    pool.empty_cache();
    assert_eq!(pool.memory_stats().reserved_bytes.all.current, 0);
    pool.check_consistency().unwrap();
}

#[test]
fn many_threads_allocate_and_free_concurrently() {
    let gpu = common::gpu();
    let pool = pool(gpu, "");
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                let mut next = move || {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state
                };
                let mut live: Vec<Block> = Vec::new();
                let mut allocs = 0u64;
                for _ in 0..10_000 {
                    if live.is_empty() || next() % 3 != 0 {
                        // 1 B to 4 MiB, log-uniform.
                        let size = 1 + (next() % (1 << (next() % 23)));
                        live.push(pool.alloc(size).unwrap());
                        allocs += 1;
                    } else {
                        let index = (next() % live.len() as u64) as usize;
                        live.swap_remove(index);
                    }
                    if live.len() > 64 {
                        live.drain(..32);
                    }
                }
                (allocs, live)
            })
        })
        .collect();
    let results: Vec<(u64, Vec<Block>)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let allocs: u64 = results.iter().map(|r| r.0).sum();
    let still_live: u64 = results.iter().map(|r| r.1.len() as u64).sum();
    let stats = pool.memory_stats();
    assert_eq!(stats.allocation.all.current, still_live);
    assert_eq!(stats.allocation.all.allocated, allocs);
    assert_eq!(stats.allocation.all.freed, allocs - still_live);
    let live_bytes: u64 = results
        .iter()
        .flat_map(|r| r.1.iter())
        .map(|b| b.capacity())
        .sum();
    assert_eq!(stats.allocated_bytes.all.current, live_bytes);
    pool.check_consistency().unwrap();
    // No two live blocks of different threads overlap.
    let mut ranges: Vec<(u64, u64, u64)> = results
        .iter()
        .flat_map(|r| r.1.iter())
        .map(|b| (b.segment().0 as u64, b.offset(), b.offset() + b.capacity()))
        .collect();
    ranges.sort_unstable();
    assert!(
        ranges
            .windows(2)
            .all(|w| w[0].0 != w[1].0 || w[0].2 <= w[1].1),
        "live blocks overlap"
    );
    drop(results);
    assert_eq!(pool.memory_stats().allocated_bytes.all.current, 0);
}

#[test]
fn bad_requests_are_clear_errors() {
    let gpu = common::gpu();
    let pool = pool(gpu, "");
    assert_eq!(pool.alloc(0).unwrap_err(), AllocError::ZeroSize);
    let max = gpu.limits().max_buffer_size;
    let error = pool.alloc(max + 1).unwrap_err();
    assert!(matches!(error, AllocError::TooLarge { .. }), "{error}");
    assert!(error.to_string().contains("max_buffer_size"), "{error}");
    // A block over the storage binding limit is served, but refuses to be one binding.
    let limit = gpu.limits().max_storage_buffer_binding_size;
    let big = pool.alloc(limit + 4096).unwrap();
    let error = big.binding().unwrap_err();
    assert!(matches!(error, BindingError::TooLarge { .. }));
    assert!(error.to_string().contains("binding_range"), "{error}");
    let window = big.binding_range(0, limit).unwrap();
    assert_eq!(window.offset, big.offset());
    assert!(matches!(
        big.binding_range(4, 16),
        Err(BindingError::Misaligned { .. })
    ));
    assert!(matches!(
        big.binding_range(big.capacity(), 4),
        Err(BindingError::OutOfRange { .. })
    ));
    let error = pool
        .write(&big, &vec![0; big.size() as usize + 1])
        .unwrap_err();
    assert!(error.to_string().contains("do not fit a block"), "{error}");
    // Mappable usages belong to the staging pool.
    let options = PoolOptions {
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        ..Default::default()
    };
    let refused = Pool::with_options(gpu.device(), gpu.queue(), Config::default(), options);
    assert!(matches!(refused, Err(PoolError::Usage { .. })));
    // A fraction needs the device size; lavapipe reports it through Vulkan, so this works.
    let fraction = Pool::from_context(
        gpu,
        Config::parse("per_process_memory_fraction:0.5").unwrap(),
    )
    .unwrap();
    assert!(fraction.memory_cap().is_some());
}

#[test]
fn pool_and_block_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Pool>();
    assert_send_sync::<Block>();
}

#[test]
fn reuse_cache_keeps_statistics_exact_and_blocks_outlive_the_pool() {
    let gpu = common::gpu();
    let pool = pool(gpu, "policy:pytorch");
    let first = pool.alloc(3000).unwrap();
    let (buffer, offset) = (first.buffer().clone(), first.offset());
    drop(first);
    // The same size comes straight back from the reuse cache.
    let again = pool.alloc(3000).unwrap();
    assert_eq!((again.buffer(), again.offset()), (&buffer, offset));
    drop(again);
    for _ in 0..10 {
        drop(pool.alloc(3000).unwrap());
    }
    let stats = pool.memory_stats();
    assert_eq!(stats.allocation.all.allocated, 12);
    assert_eq!(stats.allocation.all.freed, 12);
    assert_eq!(stats.allocation.all.current, 0);
    assert_eq!(stats.requested_bytes.all.allocated, 12 * 3000);
    assert_eq!(stats.allocated_bytes.small_pool.allocated, 12 * 3072);
    assert_eq!(stats.allocated_bytes.all.peak, 3072);
    pool.check_consistency().unwrap();
    pool.reset_accumulated_stats();
    let reset = pool.memory_stats();
    assert_eq!(
        (reset.allocation.all.allocated, reset.num_device_alloc),
        (0, 0)
    );
    assert_eq!(
        reset.reserved_bytes.all.current,
        stats.reserved_bytes.all.current
    );
    // A different size sees the dropped block's memory as free: no new segment.
    let other = pool.alloc(5000).unwrap();
    assert_eq!(pool.memory_stats().segment.all.current, 1);
    let survivor = pool.alloc(1 << 20).unwrap();
    drop(pool);
    // The block stays valid after the last pool handle is gone.
    assert!(survivor.binding().is_ok());
    drop((other, survivor));
}
