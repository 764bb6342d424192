//! The wgpu pool on a real adapter (lavapipe in CI): data integrity of blocks sharing a
//! segment, reuse after free in submission order, out-of-memory under a cap, empty_cache,
//! many threads, and bad input.
//!
//! These tests need an adapter and fail, saying how to install one, when there is none.

mod common;

use common::pattern_bytes as pattern;
use wgpool::config::Config;
use wgpool::engine::{AllocError, SizeLimit};
use wgpool::gpu::sparse::{ChunkPolicy, PagedMemory};
use wgpool::gpu::transfer::{read_region, write_region};
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::kernels::{Dtype, KernelCall, Kernels, pattern_word};
use wgpool::pool::{
    BindingAccess, BindingError, Block, BlockBindings, FreeTiming, MemoryMode, Pool, PoolError,
    PoolOptions, ReadWriteError,
};

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
    // Blocks of the small kind, of several sizes: all land in one 2 MiB segment.
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

/// A copy reads block A; A is dropped once the copy is submitted, and the next block of its
/// size takes A's memory at once and is overwritten: the copy still saw A's bytes.
fn reuse_after_free_follows_submission_order_in(conf: &str, mode: MemoryMode) {
    let gpu = common::gpu();
    let pool = pool(gpu, conf);
    assert_eq!(pool.memory_mode(), mode);
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
    let (buffer, offset) = (a.buffer().clone(), a.offset());
    kernels.submit(&copy).unwrap();
    // The copy is submitted: say so, and A's memory may go to the next block at once.
    pool.mark_submitted();
    drop(a);
    // ... once the prepared copy, which could be recorded again and still binds A's memory,
    // is gone too.
    let meanwhile = pool.alloc(size).unwrap();
    assert_ne!(
        (meanwhile.buffer(), meanwhile.offset()),
        (&buffer, offset),
        "a live prepared kernel keeps A's memory"
    );
    assert_eq!(pool.referenced_bytes(), size);
    drop(meanwhile); // exposed by buffer() above: held until this thread's next submit
    drop(copy);
    assert_eq!(pool.referenced_bytes(), 0);
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
fn reuse_after_free_follows_submission_order() {
    reuse_after_free_follows_submission_order_in("policy:pytorch", MemoryMode::Segments);
}

#[test]
fn reuse_after_free_follows_submission_order_in_pages_mode() {
    reuse_after_free_follows_submission_order_in("expandable_segments:True", MemoryMode::Pages);
}

/// Under a 64 MiB cap a second 40 MiB block is refused with a message that explains it;
/// freed memory then serves it, and its bytes are its own.
fn out_of_memory_under_a_cap_is_an_error_and_the_pool_recovers_in(conf: &str, mode: MemoryMode) {
    let gpu = common::gpu();
    let pool = pool(gpu, &format!("{conf},memory_limit_mb:64"));
    assert_eq!(pool.memory_mode(), mode);
    let first = pool.alloc(40 << 20).unwrap();
    pool.write(&first, &vec![0x3C; 40 << 20]).unwrap();
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
    assert!(
        pool.read(&first).unwrap() == vec![0x3C; 40 << 20],
        "the first block is intact"
    );
    drop(first);
    let second = pool
        .alloc(40 << 20)
        .expect("allocation succeeds once memory is freed");
    pool.write(&second, &vec![0xC3; 40 << 20]).unwrap();
    assert!(pool.read(&second).unwrap() == vec![0xC3; 40 << 20]);
    let held = pool.device_memory_usage();
    assert!(
        held.device_bytes <= 64 << 20 && held.device_bytes_peak <= 64 << 20,
        "device memory stays under the cap: {held:?}"
    );
    pool.check_consistency().unwrap();
}

#[test]
fn out_of_memory_under_a_cap_is_an_error_and_the_pool_recovers() {
    out_of_memory_under_a_cap_is_an_error_and_the_pool_recovers_in(
        "expandable_segments:False",
        MemoryMode::Segments,
    );
}

#[test]
fn out_of_memory_under_a_cap_is_an_error_and_the_pool_recovers_in_pages_mode() {
    out_of_memory_under_a_cap_is_an_error_and_the_pool_recovers_in(
        "expandable_segments:True",
        MemoryMode::Pages,
    );
}

#[test]
fn empty_cache_destroys_unused_segments() {
    // A device of its own: the test compares wgpu's device-wide allocator report.
    let gpu = common::own(|| {
        GpuContext::headless(&HeadlessOptions::default()).expect("the shared device's adapter")
    });
    let pool = pool(&gpu, "expandable_segments:False");
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

/// Chunks of 1 MiB, no larger than any block here: no chunk holds pages of two blocks.
fn one_mib_chunks() -> ChunkPolicy {
    ChunkPolicy::default()
        .with_min_chunk(1 << 20)
        .with_max_chunk(1 << 20)
        .with_device_divisor(0)
        .with_granule(1 << 20)
        .with_spare_on_large(false)
        .with_bind_spare(false)
}

/// In pages mode freed blocks keep their pages mapped (the cache); `empty_cache` unmaps every
/// idle page and frees the device memory behind it, while live blocks keep their pages and
/// their bytes. Chunks are freed whole, so with chunks no larger than a block every idle byte
/// goes back.
#[test]
fn empty_cache_frees_idle_pages_in_pages_mode() {
    let gpu = common::gpu();
    let pool = Pool::with_options(
        gpu.device(),
        gpu.queue(),
        Config::parse("expandable_segments:True").unwrap(),
        PoolOptions::default().with_chunk_policy(one_mib_chunks()),
    )
    .unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    let keep = pool.alloc(3 << 20).unwrap();
    let kept = pattern(9, 3 << 20);
    pool.write(&keep, &kept).unwrap();
    let cached: Vec<Block> = (0..4).map(|_| pool.alloc(24 << 20).unwrap()).collect();
    for (seed, block) in cached.iter().enumerate() {
        pool.write(block, &pattern(seed as u32 + 20, 1 << 20))
            .unwrap();
    }
    let reserved_before = pool.memory_reserved();
    let device_before = pool.device_memory_usage().device_bytes;
    assert!(device_before >= (3 << 20) + 4 * (24 << 20));
    drop(cached);
    assert_eq!(
        pool.memory_reserved(),
        reserved_before,
        "freed blocks stay mapped"
    );
    assert_eq!(pool.device_memory_usage().device_bytes, device_before);
    pool.empty_cache();
    let usage = pool.device_memory_usage();
    let reserved = pool.memory_reserved();
    assert!(
        device_before - usage.device_bytes >= 4 * (24 << 20),
        "the cached blocks' memory went back to the device: {} of {device_before} left",
        usage.device_bytes
    );
    assert!((3 << 20..4 << 20).contains(&reserved), "{reserved}");
    assert_eq!(usage.device_bytes, reserved, "nothing idle is held");
    assert_eq!(pool.memory_stats().reserved_bytes.all.current, reserved);
    assert_eq!(
        pool.read(&keep).unwrap(),
        kept,
        "the live block keeps its bytes"
    );
    // The live block still works with kernels.
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    kernels
        .run(&KernelCall::fill(keep.operand(), 0x0BAD_F00D))
        .unwrap();
    assert!(
        words(&pool.read(&keep).unwrap())
            .iter()
            .all(|&w| w == 0x0BAD_F00D)
    );
    drop(keep);
    // The fill named the block and was submitted by `Kernels::run`: say so, then it is free.
    pool.mark_submitted();
    pool.empty_cache();
    assert_eq!(pool.memory_reserved(), 0);
    assert_eq!(pool.device_memory_usage().device_bytes, 0);
    pool.check_consistency().unwrap();
}

/// With the default chunks (the larger of 1/128 of the pool's memory and 1/2048 of the
/// device), `empty_cache` frees every chunk that no live block uses: what stays beyond the
/// reserved bytes is the rest of the one chunk the live block shares, less than a chunk.
#[test]
fn empty_cache_keeps_only_the_chunk_a_live_block_shares_with_default_chunks() {
    let gpu = common::gpu();
    let pool = pool(gpu, "expandable_segments:True");
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    let facts = gpu.page_mapping().unwrap().facts();
    let chunk = ChunkPolicy::default().chunk_size(0, facts.heap_size, facts.page_size);
    let keep = pool.alloc(3 << 20).unwrap();
    let cached: Vec<Block> = (0..4).map(|_| pool.alloc(24 << 20).unwrap()).collect();
    let device_before = pool.device_memory_usage().device_bytes;
    drop(cached);
    pool.empty_cache();
    let device = pool.device_memory_usage().device_bytes;
    let reserved = pool.memory_reserved();
    assert!((3 << 20..4 << 20).contains(&reserved), "{reserved}");
    assert!(
        device >= reserved && device - reserved < chunk,
        "{device} B held for {reserved} B reserved (chunk {chunk} B, {device_before} B before)"
    );
    drop(keep);
    pool.empty_cache();
    assert_eq!(pool.device_memory_usage().device_bytes, 0);
}

/// The first bytes (up to 8) a thread stamps into a block: its thread and allocation count.
fn stamp(thread: u64, count: u64, size: u64) -> Vec<u8> {
    let mut bytes = ((thread << 48) | count).to_le_bytes().to_vec();
    bytes.truncate(size.min(8) as usize);
    bytes
}

/// What a thread of the many-threads test did: allocations, stamps checked, and the blocks
/// (with their stamps) it still holds.
type ThreadResult = (u64, u64, Vec<(Block, Vec<u8>)>);

/// 4 threads x 10,000 random allocations and frees of 1 B to 4 MiB on one pool under `conf`.
/// Every 8th block is stamped when allocated; stamps are checked when such a block of at
/// most 256 KiB is freed and on every survivor (a block that shared bytes with another, or
/// lost its pages, would fail), and the
/// statistics and the placement of live blocks must agree with what the threads hold.
fn many_threads_allocate_and_free_concurrently_in(conf: &str, mode: MemoryMode) {
    let gpu = common::gpu();
    let pool = pool(gpu, conf);
    assert_eq!(pool.memory_mode(), mode);
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
                // Every 8th block is stamped (a write is a submission: stamping all would
                // make the test 20 times slower on lavapipe).
                let mut live: Vec<(Block, Vec<u8>)> = Vec::new();
                let mut allocs = 0u64;
                let mut checked = 0u64;
                for op in 0..10_000u64 {
                    if live.is_empty() || next() % 3 != 0 {
                        // 1 B to 4 MiB, log-uniform.
                        let size = 1 + (next() % (1 << (next() % 23)));
                        let block = pool.alloc(size).unwrap();
                        let stamp = if allocs % 8 == 0 {
                            let stamp = stamp(t, allocs, size);
                            pool.write(&block, &stamp).unwrap();
                            stamp
                        } else {
                            Vec::new()
                        };
                        live.push((block, stamp));
                        allocs += 1;
                    } else {
                        let index = (next() % live.len() as u64) as usize;
                        let (block, stamp) = live.swap_remove(index);
                        if !stamp.is_empty() && block.size() <= 256 << 10 {
                            let got = pool.read(&block).unwrap();
                            assert_eq!(got[..stamp.len()], stamp[..], "thread {t}, op {op}");
                            checked += 1;
                        }
                    }
                    if live.len() > 64 {
                        live.drain(..32);
                    }
                }
                (allocs, checked, live)
            })
        })
        .collect();
    let results: Vec<ThreadResult> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let allocs: u64 = results.iter().map(|r| r.0).sum();
    let checked: u64 = results.iter().map(|r| r.1).sum();
    assert!(checked > 100, "{checked} stamps checked in flight");
    let blocks = || results.iter().flat_map(|r| r.2.iter());
    for (block, stamp) in blocks().filter(|(_, stamp)| !stamp.is_empty()) {
        assert_eq!(pool.read(block).unwrap()[..stamp.len()], stamp[..]);
    }
    let still_live = blocks().count() as u64;
    let stats = pool.memory_stats();
    assert_eq!(stats.allocation.all.current, still_live);
    assert_eq!(stats.allocation.all.allocated, allocs);
    assert_eq!(stats.allocation.all.freed, allocs - still_live);
    let live_bytes: u64 = blocks().map(|(b, _)| b.capacity()).sum();
    assert_eq!(stats.allocated_bytes.all.current, live_bytes);
    pool.check_consistency().unwrap();
    // No two live blocks of different threads overlap.
    let mut ranges: Vec<(u64, u64, u64)> = blocks()
        .map(|(b, _)| (b.segment().0 as u64, b.offset(), b.offset() + b.capacity()))
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
fn many_threads_allocate_and_free_concurrently() {
    many_threads_allocate_and_free_concurrently_in(
        "expandable_segments:False",
        MemoryMode::Segments,
    );
}

/// Issue 10: 4 threads x 10k operations on a pool in pages mode, with data checks.
#[test]
fn many_threads_allocate_and_free_concurrently_in_pages_mode() {
    many_threads_allocate_and_free_concurrently_in("expandable_segments:True", MemoryMode::Pages);
}

/// Bad requests under `conf`: zero bytes, above the largest block (whose message names where
/// that limit comes from), windows of a block over the binding limit, a write that does not
/// fit, mappable usages, and a fraction cap.
fn bad_requests_are_clear_errors_in(conf: &str, mode: MemoryMode, limit_named: &str) {
    let gpu = common::gpu();
    let pool = pool(gpu, conf);
    assert_eq!(pool.memory_mode(), mode);
    assert_eq!(pool.alloc(0).unwrap_err(), AllocError::ZeroSize);
    let error = pool.alloc(pool.max_block_size() + 1).unwrap_err();
    assert!(matches!(error, AllocError::TooLarge { .. }), "{error}");
    assert!(error.to_string().contains(limit_named), "{error}");
    let error = pool.alloc(gpu.limits().max_buffer_size + 1).unwrap_err();
    assert!(matches!(error, AllocError::TooLarge { .. }), "{error}");
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
    drop(big);
    pool.check_consistency().unwrap();
    // Mappable usages belong to the staging pool.
    let options = PoolOptions::default()
        .with_usage(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
    let refused = Pool::with_options(
        gpu.device(),
        gpu.queue(),
        Config::parse(conf).unwrap(),
        options,
    );
    assert!(matches!(refused, Err(PoolError::Usage { .. })));
    // A fraction needs the device size: Vulkan reports it; elsewhere the pool asks for
    // memory_limit_mb instead.
    let fraction = Pool::from_context(
        gpu,
        Config::parse(&format!("{conf},per_process_memory_fraction:0.5")).unwrap(),
    );
    if gpu.capabilities().memory_heaps.is_available() {
        let fraction = fraction.unwrap();
        assert!(fraction.memory_cap().is_some());
        assert_eq!(fraction.memory_mode(), mode);
    } else {
        let error = fraction.expect_err("a fraction of an unknown size is refused");
        assert!(error.to_string().contains("memory_limit_mb"), "{error}");
    }
}

#[test]
fn bad_requests_are_clear_errors() {
    bad_requests_are_clear_errors_in(
        "expandable_segments:False",
        MemoryMode::Segments,
        "max_buffer_size",
    );
}

#[test]
fn bad_requests_are_clear_errors_in_pages_mode() {
    let limit = pages_size_limit().to_string();
    bad_requests_are_clear_errors_in("expandable_segments:True", MemoryMode::Pages, &limit);
}

/// What bounds a pages-mode pool's largest block on the test device: its address ranges
/// where they are smaller than the largest buffer (lavapipe: 2 GiB - 4 KiB), else the
/// largest buffer itself (NVIDIA, whose ranges reach wgpu's `max_buffer_size`).
fn pages_size_limit() -> SizeLimit {
    let gpu = common::gpu();
    let largest = pool(gpu, "expandable_segments:True").max_block_size();
    if largest < gpu.limits().max_buffer_size / 512 * 512 {
        SizeLimit::Range
    } else {
        SizeLimit::Source
    }
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
    // (`segment()` names the buffer without exposing it: see FreeTiming.)
    let (segment, offset) = (first.segment(), first.offset());
    drop(first);
    // The same size comes straight back from the reuse cache.
    let again = pool.alloc(3000).unwrap();
    assert_eq!((again.segment(), again.offset()), (segment, offset));
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

/// Allocations that miss the reuse cache take the pool references of drained blocks from
/// the pool's bank instead of new ones; the bank gives them all back when the last handle
/// drops, so a block that outlives the pool holds its only reference.
#[test]
fn banked_pool_references_go_back_with_the_last_handle() {
    // A device of its own: a submission point on a shared device (another test's) upgrades
    // every pool's weak reference for a moment, which the counts below would see.
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    // The cache on in either mode (fixed segments have it off by default).
    let pool = pool(&own, "reuse_cache:True");
    let survivor = pool.alloc(4096).unwrap();
    assert_eq!(survivor.pool_references(), 2, "the handle and the block");
    // Alternating sizes: each allocation misses the cache and drains the block before.
    for round in 0..40u64 {
        let a = pool.alloc(1000 + 512 * (round % 5)).unwrap();
        let b = pool.alloc(70_000 + 4096 * (round % 3)).unwrap();
        drop((a, b));
    }
    // Statistics drain the cache too: every dropped block's reference is now banked.
    assert_eq!(pool.memory_stats().allocation.all.current, 1);
    let banked = survivor.pool_references() - 2;
    assert!(
        banked > 0,
        "drained blocks left their references in the bank"
    );
    let clone = pool.clone();
    drop(pool);
    assert_eq!(
        survivor.pool_references(),
        2 + banked,
        "a handle is left: the bank stays"
    );
    drop(clone);
    assert_eq!(
        survivor.pool_references(),
        1,
        "the last handle gave every banked reference back"
    );
    drop(survivor);
}

/// A freed block's record serves a later block, of its own segment or another: the later
/// block must name its own segment's buffer, never the one the record held before.
#[test]
fn reused_records_name_the_buffer_of_their_new_block() {
    let gpu = common::gpu();
    let pool = pool(gpu, "policy:pytorch,expandable_segments:False");
    const MIB: u64 = 1 << 20;
    // Two large blocks: a segment each. (`segment()` names the buffer without exposing the
    // block, which would hold it back until a submission point: see FreeTiming.)
    let a = pool.alloc(12 * MIB).unwrap();
    let b = pool.alloc(12 * MIB).unwrap();
    let (a_segment, b_segment) = (a.segment(), b.segment());
    assert_ne!(a_segment, b_segment);
    // A's record serves a block in A's segment: the one free place that fits.
    drop(a);
    let c = pool.alloc(6 * MIB).unwrap();
    assert_eq!(c.segment(), a_segment);
    // B's record serves a block that best fit puts in what is left of A's segment.
    drop(b);
    let d = pool.alloc(5 * MIB).unwrap();
    assert_eq!(
        d.segment(),
        a_segment,
        "best fit: A's 6 MiB rather than B's 12"
    );
    // And a new block in B's segment.
    let e = pool.alloc(12 * MIB).unwrap();
    assert_eq!(e.segment(), b_segment);
    assert_eq!(c.buffer(), d.buffer(), "both are in A's segment");
    assert_ne!(d.buffer(), e.buffer(), "the record d took held B's buffer");
    // Their bytes are their own.
    for (block, seed) in [(&c, 1u32), (&d, 2), (&e, 3)] {
        pool.write(block, &pattern(seed, block.size())).unwrap();
    }
    for (block, seed) in [(&c, 1u32), (&d, 2), (&e, 3)] {
        assert!(pool.read(block).unwrap() == pattern(seed, block.size()));
    }
    pool.check_consistency().unwrap();
}

/// The sequence of issue 13, item 1: a kernel recorded on block A, A dropped, a new block
/// written, then the encoder submitted with the application's own `queue.submit`.
fn a_block_dropped_before_its_commands_are_submitted_keeps_its_bytes_for_them_in(
    conf: &str,
    mode: MemoryMode,
) {
    let gpu = common::gpu();
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let size = 64 << 10;
    let original = pattern(11, size);
    for timing in [FreeTiming::AfterSubmit, FreeTiming::AtDrop] {
        let options = PoolOptions::default().with_free_timing(timing);
        let config = Config::parse(conf).unwrap();
        let pool = Pool::with_options(gpu.device(), gpu.queue(), config, options).unwrap();
        assert_eq!(pool.memory_mode(), mode);
        let a = pool.alloc(size).unwrap();
        let out = pool.alloc(size).unwrap();
        pool.write(&a, &original).unwrap();
        let mut encoder = gpu.device().create_command_encoder(&Default::default());
        kernels
            .record(
                &mut encoder,
                &KernelCall::copy(Dtype::F32, a.operand(), out.operand()),
            )
            .unwrap();
        let (buffer, offset, capacity) = (a.buffer().clone(), a.offset(), a.capacity());
        drop(a);
        if timing == FreeTiming::AfterSubmit {
            // A held block is allocated: releasing the cache keeps its segment (its pages).
            pool.empty_cache();
        }
        let b = pool.alloc(size).unwrap();
        let reused = b.buffer() == &buffer && b.offset() == offset;
        pool.write(&b, &vec![0xEE; size as usize]).unwrap();
        gpu.queue().submit([encoder.finish()]);
        let got = pool.read(&out).unwrap();
        match timing {
            FreeTiming::AfterSubmit => {
                assert!(
                    !reused,
                    "A's memory is held back while the copy is unsubmitted"
                );
                assert_eq!(got, original, "the recorded copy read A's bytes");
                assert_eq!(pool.held_bytes(), capacity);
                assert!(
                    pool.memory_summary()
                        .contains("wait for their recorded commands to be submitted")
                );
                pool.mark_submitted();
                assert_eq!(pool.held_bytes(), 0);
                let c = pool.alloc(size).unwrap();
                assert!(
                    c.buffer() == &buffer && c.offset() == offset,
                    "after the submission point A's memory serves the next request"
                );
            }
            _ => {
                // What the default prevents: under AtDrop the new block took A's memory and
                // its write ran before the recorded copy.
                assert!(reused);
                assert_eq!(got, vec![0xEE; size as usize]);
            }
        }
        drop(b);
        pool.check_consistency().unwrap();
    }
}

#[test]
fn a_block_dropped_before_its_commands_are_submitted_keeps_its_bytes_for_them() {
    a_block_dropped_before_its_commands_are_submitted_keeps_its_bytes_for_them_in(
        "policy:pytorch",
        MemoryMode::Segments,
    );
}

#[test]
fn a_block_dropped_before_its_commands_are_submitted_keeps_its_bytes_in_pages_mode() {
    a_block_dropped_before_its_commands_are_submitted_keeps_its_bytes_for_them_in(
        "expandable_segments:True",
        MemoryMode::Pages,
    );
}

#[test]
fn pool_submit_is_a_submission_point_and_unexposed_blocks_return_at_once() {
    let gpu = common::gpu();
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let pool = pool(gpu, "policy:pytorch");
    // Never bound: dropped straight back into the cache.
    let quiet = pool.alloc(4096).unwrap();
    pool.write(&quiet, &[1; 4096]).unwrap();
    assert_eq!(pool.read(&quiet).unwrap(), vec![1; 4096]);
    drop(quiet);
    assert_eq!(pool.held_bytes(), 0);
    let a = pool.alloc(4096).unwrap();
    let mut encoder = gpu.device().create_command_encoder(&Default::default());
    kernels
        .record(&mut encoder, &KernelCall::fill(a.operand(), 0x0102_0304))
        .unwrap();
    drop(a);
    assert_eq!(pool.held_bytes(), 4096);
    assert_eq!(
        pool.memory_stats().allocated_bytes.all.current,
        4096,
        "held blocks stay allocated"
    );
    pool.submit([encoder.finish()]);
    assert_eq!(pool.held_bytes(), 0);
    assert_eq!(pool.memory_stats().allocated_bytes.all.current, 0);
    pool.check_consistency().unwrap();
}

const NATURAL_KERNEL: &str = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < arrayLength(&y)) {
        y[i] = x[i] * w[i];
    }
}
";

#[test]
fn the_natural_kernel_shape_binds_through_block_bindings() {
    let gpu = common::gpu();
    let device = gpu.device();
    // Fixed segments: blocks of one pool share its buffer. (In pages mode blocks reach their
    // range through wrappers of their own, so they mostly do not; the rule still applies to
    // any two that do.)
    let activations = pool(gpu, "expandable_segments:False");
    let weights = pool(gpu, "");
    let n = 1000u64;
    let (x, y) = (
        activations.alloc(4 * n).unwrap(),
        activations.alloc(4 * n).unwrap(),
    );
    let w = weights.alloc(4 * n).unwrap();
    assert_eq!(
        x.buffer(),
        y.buffer(),
        "blocks of one pool share a segment buffer"
    );
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let ws: Vec<f32> = (0..n).map(|i| 0.5 + (i % 3) as f32).collect();
    activations.write(&x, bytemuck::cast_slice(&xs)).unwrap();
    weights.write(&w, bytemuck::cast_slice(&ws)).unwrap();

    // Declared as is, x (read-only) and y (read-write) share a buffer: a clear error, before
    // wgpu would refuse the dispatch.
    let natural = BlockBindings::new()
        .read(0, &x)
        .read(1, &w)
        .read_write(2, &y);
    let error = natural.check().unwrap_err();
    assert_eq!(
        error,
        BindingError::ReadOnlyConflict {
            read_only: 0,
            read_write: 2
        }
    );
    for needle in ["read_write", "another pool"] {
        assert!(error.to_string().contains(needle), "{error}");
    }
    assert!(
        natural
            .create_layout(device, wgpu::ShaderStages::COMPUTE)
            .is_err()
    );

    // The documented shape: inputs that share the output's pool are read_write, inputs from
    // another pool stay read-only.
    let source = NATURAL_KERNEL.replace("var<storage, read> x", "var<storage, read_write> x");
    let bindings = BlockBindings::new()
        .read_write(0, &x)
        .read(1, &w)
        .read_write(2, &y);
    let layout = bindings
        .create_layout(device, wgpu::ShaderStages::COMPUTE)
        .unwrap();
    let group = bindings.create_bind_group(device, &layout).unwrap();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(n.div_ceil(64) as u32, 1, 1);
    }
    activations.submit([encoder.finish()]);
    weights.mark_submitted();
    let ys: Vec<f32> = bytemuck::pod_collect_to_vec(&activations.read(&y).unwrap());
    assert!(ys.iter().enumerate().all(|(i, &v)| v == xs[i] * ws[i]));

    // The pieces, one at a time.
    let resource = wgpu::BindingResource::try_from(&y).unwrap();
    let wgpu::BindingResource::Buffer(binding) = resource else {
        panic!("a buffer binding")
    };
    assert_eq!(
        (binding.offset, binding.size.map(|s| s.get())),
        (y.offset(), Some(4 * n))
    );
    let entry = BindingAccess::ReadOnly.layout_entry(1, wgpu::ShaderStages::COMPUTE);
    assert!(matches!(
        entry.ty,
        wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only: true },
            ..
        }
    ));
    assert_eq!(
        BlockBindings::new()
            .read_write(0, &x)
            .read_write(0, &y)
            .check(),
        Err(BindingError::DuplicateBinding { binding: 0 })
    );
}

/// Issue 15, F3: a zero-length window used to bind "to the end of the buffer".
#[test]
fn a_block_never_binds_bytes_outside_itself() {
    let gpu = common::gpu();
    let device = gpu.device();
    let pool = pool(gpu, "policy:pytorch");
    let a = pool.alloc(1000).unwrap();
    let neighbour = pool.alloc(1000).unwrap();
    assert_eq!(a.buffer(), neighbour.buffer());
    assert_eq!(
        a.binding_range(0, 0).unwrap_err(),
        BindingError::Empty { offset: 0 }
    );
    assert!(matches!(
        a.binding_range(512, 0),
        Err(BindingError::Empty { .. })
    ));
    pool.write(&neighbour, &[GUARD; 1000]).unwrap();
    let pipeline = common::fill_ones_pipeline(device);
    let layout = pipeline.get_bind_group_layout(0);
    // Every window the block hands out, the whole capacity included: the kernel writes all
    // of it and no byte of the neighbour.
    for (start, size) in [(0, a.bound_size()), (0, a.capacity()), (512, 4)] {
        let group = BlockBindings::new()
            .window(0, BindingAccess::ReadWrite, &a, start, size)
            .create_bind_group(device, &layout)
            .unwrap();
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(1024, 1, 1);
        }
        pool.submit([encoder.finish()]);
        assert_eq!(pool.read(&neighbour).unwrap(), vec![GUARD; 1000]);
    }
    assert_eq!(pool.read(&a).unwrap(), vec![0xFF; 1000]);
}

/// Issue 13, item 4: a pool without COPY_SRC, such as a uniform pool.
#[test]
fn read_on_a_pool_without_copy_src_is_a_typed_error() {
    let gpu = common::gpu();
    let options = PoolOptions::default()
        .with_usage(wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST)
        .with_label("uniforms");
    let uniforms =
        Pool::with_options(gpu.device(), gpu.queue(), Config::default(), options).unwrap();
    let block = uniforms.alloc(256).unwrap();
    uniforms.write(&block, &[1; 256]).unwrap();
    let error = uniforms.read(&block).unwrap_err();
    assert!(
        matches!(
            error,
            ReadWriteError::MissingUsage {
                needed: "COPY_SRC",
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("PoolOptions::with_usage"),
        "{error}"
    );
    // A short write of odd length would need to read the bytes after it.
    let error = uniforms.write(&block, &[2; 5]).unwrap_err();
    assert!(
        matches!(
            error,
            ReadWriteError::MissingUsage {
                needed: "COPY_SRC",
                ..
            }
        ),
        "{error}"
    );
    assert!(
        block.binding().is_ok(),
        "the block still binds as a uniform"
    );
}

/// Issue 15, F9: TooLarge means larger than the largest block the pool can serve, which the
/// pool reports (`max_block_size`): `max_buffer_size` for segments, the largest address range
/// for pages; a request of exactly that size is not TooLarge.
fn too_large_means_above_the_largest_block_in(conf: &str, limit: SizeLimit) -> Pool {
    let gpu = common::gpu();
    let pool = pool(gpu, conf);
    let largest = pool.max_block_size();
    assert_eq!(largest % 512, 0);
    assert!(largest <= gpu.limits().max_buffer_size);
    for size in [largest + 1, gpu.limits().max_buffer_size + 1, u64::MAX] {
        let error = pool.alloc(size).unwrap_err();
        let AllocError::TooLarge {
            requested,
            max,
            limit: named,
        } = error
        else {
            panic!("{size} bytes should be too large, got {error}")
        };
        assert_eq!((requested, max, named), (size, largest, limit));
    }
    pool.check_consistency().unwrap();
    pool
}

#[test]
fn too_large_means_above_the_largest_block() {
    let pool =
        too_large_means_above_the_largest_block_in("expandable_segments:False", SizeLimit::Source);
    let max_buffer_size = common::gpu().limits().max_buffer_size;
    assert_eq!(pool.max_block_size(), max_buffer_size / 512 * 512);
}

/// In pages mode the largest block is the largest range the device can reserve: its largest
/// buffer within its sparse address space (lavapipe: 2 GiB - 4 KiB), rounded to the page.
/// The error names the range where it binds (lavapipe), else the largest buffer (NVIDIA).
#[test]
fn too_large_in_pages_mode_names_the_range_limit() {
    let pool =
        too_large_means_above_the_largest_block_in("expandable_segments:True", pages_size_limit());
    let gpu = common::gpu();
    let facts = gpu.page_mapping().unwrap().facts();
    let device_largest = facts
        .max_range_size
        .min(facts.address_space)
        .min(gpu.limits().max_buffer_size);
    let largest = pool.max_block_size();
    assert!(largest <= device_largest);
    // Within one large page (512 KiB with the default policy) of the device's largest range.
    assert!(
        largest + (512 << 10) > device_largest,
        "{largest} {facts:?}"
    );
}

/// A block larger than the usual range (lavapipe: 64 MiB) gets a range of its own size, its
/// bytes at both ends are its own, and its pages go back to the device when it is freed.
/// Where the usual range is already the largest (NVIDIA: wgpu's largest buffer, 4 GiB less
/// 2 MiB), the largest block does the same.
#[test]
fn a_block_larger_than_a_range_gets_a_range_of_its_own() {
    let gpu = common::gpu();
    let pool = pool(gpu, "expandable_segments:True");
    let range = PagedMemory::new(
        gpu.device(),
        gpu.queue(),
        pool.usage(),
        "probe",
        ChunkPolicy::default(),
    )
    .unwrap()
    .range_size();
    let small = pool.alloc(4096).unwrap();
    let size = (2 * range + 4096).min(pool.max_block_size());
    assert!(size > range / 2, "{size} against a range of {range}");
    let big = pool.alloc(size).unwrap();
    assert_ne!(big.buffer(), small.buffer(), "a range of its own");
    assert!(big.buffer().size() >= size);
    let head = pattern(1, 64 << 10);
    let tail = pattern(2, 64 << 10);
    pool.write(&big, &head).unwrap();
    let tail_at = big.offset() + size - tail.len() as u64;
    write_region(gpu.device(), gpu.queue(), big.buffer(), tail_at, &tail).unwrap();
    pool.write(&small, &[3; 4096]).unwrap();
    let read = |at: u64, len: usize| {
        read_region(gpu.device(), gpu.queue(), big.buffer(), at, len as u64).unwrap()
    };
    assert_eq!(read(big.offset(), head.len()), head);
    assert_eq!(read(tail_at, tail.len()), tail);
    assert_eq!(pool.read(&small).unwrap(), vec![3; 4096]);
    drop(big);
    // Its buffer was used by submitted copies: a submission point frees it.
    pool.mark_submitted();
    pool.empty_cache();
    assert!(pool.device_memory_usage().device_bytes < range);
    pool.check_consistency().unwrap();
}

/// Issue 25: under `policy:pytorch` in pages mode `large_segment_size_mb` is the large page.
/// At or above the device's largest range (lavapipe: 2 GiB less 4 KiB, so 2048 MiB is one
/// byte above its `max_buffer_size`) `Pool::alloc` failed with "invalid page operation";
/// the page is now clamped to the largest range: blocks are served and hold their bytes, and
/// only a request above the largest block is refused, as too large.
#[test]
fn a_large_page_above_the_largest_range_is_clamped_and_serves_blocks() {
    // A device of its own: a page of the largest range takes the whole address space.
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let gpu = &*own;
    let largest = PagedMemory::new(
        gpu.device(),
        gpu.queue(),
        wgpool::pool::DEFAULT_USAGE,
        "probe",
        ChunkPolicy::default(),
    )
    .expect("the test adapter maps pages")
    .max_range();
    let at = largest.div_ceil(1 << 20);
    for mb in [at, at + 1, 2_097_151] {
        let conf = format!("policy:pytorch,expandable_segments:True,large_segment_size_mb:{mb}");
        let pool = pool(gpu, &conf);
        assert_eq!(pool.memory_mode(), MemoryMode::Pages);
        let a = pool
            .alloc(40 << 20)
            .unwrap_or_else(|e| panic!("{conf}: {e}"));
        let b = pool
            .alloc(40 << 20)
            .unwrap_or_else(|e| panic!("{conf}: {e}"));
        let (da, db) = (pattern(1, 1 << 20), pattern(2, 1 << 20));
        pool.write(&a, &da).unwrap();
        pool.write(&b, &db).unwrap();
        assert_eq!(pool.read(&a).unwrap()[..da.len()], da[..], "{conf}");
        assert_eq!(pool.read(&b).unwrap()[..db.len()], db[..], "{conf}");
        assert!(pool.memory_reserved() <= largest, "{conf}");
        let max = pool.max_block_size();
        assert!(max <= largest);
        let error = pool.alloc(max + 1).unwrap_err();
        assert!(
            matches!(error, AllocError::TooLarge { max: m, .. } if m == max),
            "{conf}: {error}"
        );
        drop((a, b));
        pool.check_consistency().unwrap();
    }
}

/// A pool of `STORAGE | BLAS_INPUT` under `conf`, on a device without ray tracing: wgpu
/// refuses that usage. The refusal must come back from `alloc` as the source's own error,
/// with wgpu's validation error as its source, and no cache is released for it.
fn refused_usage_comes_back_as_itself(conf: &str, mode: MemoryMode) {
    let gpu = common::gpu();
    assert!(
        !gpu.features()
            .contains(wgpu::Features::EXPERIMENTAL_RAY_QUERY)
    );
    // BLAS_INPUT needs a ray-tracing feature this device lacks: create_buffer refuses it.
    let options = PoolOptions::default()
        .with_usage(wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::BLAS_INPUT);
    let pool = Pool::with_options(
        gpu.device(),
        gpu.queue(),
        Config::parse(conf).unwrap(),
        options,
    )
    .unwrap();
    assert_eq!(pool.memory_mode(), mode);
    // Refused every time, not only the first.
    for _ in 0..2 {
        let error = pool.alloc(4096).unwrap_err();
        let AllocError::Source(source) = &error else {
            panic!("expected the source's own error, got {error}")
        };
        assert!(!source.is_out_of_memory());
        let caught = std::error::Error::source(source)
            .and_then(|inner| inner.downcast_ref::<wgpool::gpu::scope::CaughtError>())
            .expect("wgpu's error is kept as the source");
        assert!(
            matches!(caught, wgpool::gpu::scope::CaughtError::Validation(_)),
            "{caught}"
        );
    }
    let stats = pool.memory_stats();
    assert_eq!((stats.num_ooms, stats.num_alloc_retries), (0, 0));
    assert_eq!(pool.memory_reserved(), 0);
    assert_eq!(pool.device_memory_usage().device_bytes, 0);
    pool.check_consistency().unwrap();
}

/// Issue 14: a validation error from segment creation is not an out-of-memory. It comes back
/// as itself, with wgpu's error as its source, and no cache is released for it.
#[test]
fn a_validation_error_from_segment_creation_comes_back_as_itself() {
    refused_usage_comes_back_as_itself("expandable_segments:False", MemoryMode::Segments);
}

/// The same in pages mode: wgpu does not validate the usages of the Vulkan buffers it wraps,
/// so the pool asks it before the first range (it once accepted the request).
#[test]
fn a_validation_error_from_range_creation_comes_back_as_itself() {
    refused_usage_comes_back_as_itself("expandable_segments:True", MemoryMode::Pages);
}

/// Issue 13, item 6: under a 16 MiB cap an 8 MiB request needs a 20 MiB segment; the message
/// says that the segment size is what does not fit, and names the option.
#[test]
fn out_of_memory_says_when_the_segment_size_is_what_does_not_fit() {
    let gpu = common::gpu();
    let capped = pool(gpu, "policy:pytorch,memory_limit_mb:16");
    let error = capped.alloc(8 << 20).unwrap_err();
    assert!(matches!(error, AllocError::OutOfMemory(_)), "{error}");
    let message = error.to_string();
    for needle in [
        "new 20.00 MiB large segment",
        "The segment size is what does not fit",
        "8.00 MiB would fit under the cap",
        "large_segment_size_mb",
    ] {
        assert!(
            message.contains(needle),
            "message lacks `{needle}`: {message}"
        );
    }
    assert!(!message.contains("pool pool"), "{message}");
    // With smaller large segments the same request fits.
    let smaller = pool(
        gpu,
        "policy:pytorch,memory_limit_mb:16,large_segment_size_mb:10",
    );
    assert!(smaller.alloc(8 << 20).is_ok());
}

/// Out-of-memory with dropped blocks still held for their recorded work says so, and what
/// frees them.
#[test]
fn out_of_memory_names_blocks_held_for_submission() {
    let gpu = common::gpu();
    let pool = pool(gpu, "policy:pytorch,memory_limit_mb:20");
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let a = pool.alloc(12 << 20).unwrap();
    let mut encoder = gpu.device().create_command_encoder(&Default::default());
    kernels
        .record(&mut encoder, &KernelCall::fill(a.operand(), 7))
        .unwrap();
    drop(a);
    let message = pool.alloc(12 << 20).unwrap_err().to_string();
    for needle in [
        "12.00 MiB of the allocated bytes are dropped blocks",
        "Pool::submit",
        "Pool::mark_submitted",
    ] {
        assert!(
            message.contains(needle),
            "message lacks `{needle}`: {message}"
        );
    }
    pool.submit([encoder.finish()]);
    assert!(
        pool.alloc(12 << 20).is_ok(),
        "the submission freed the held block"
    );
}

/// Issue 13, item 8: torch's shortcuts and a cap that changes at run time.
#[test]
fn shortcuts_and_a_cap_set_at_run_time() {
    let gpu = common::gpu();
    let options = PoolOptions::default().with_device_memory(100 << 20);
    let config = Config::parse("policy:pytorch").unwrap();
    let pool = Pool::with_options(gpu.device(), gpu.queue(), config, options).unwrap();
    assert_eq!(pool.memory_cap(), None);
    assert_eq!(
        pool.set_per_process_memory_fraction(0.25).unwrap(),
        Some(25 << 20)
    );
    assert_eq!(pool.memory_cap(), Some(25 << 20));
    let first = pool.alloc(20 << 20).unwrap();
    assert_eq!(
        (pool.memory_allocated(), pool.memory_reserved()),
        (20 << 20, 20 << 20)
    );
    assert!(matches!(
        pool.alloc(20 << 20),
        Err(AllocError::OutOfMemory(_))
    ));
    // Refused values leave the cap alone.
    assert!(pool.set_per_process_memory_fraction(1.5).is_err());
    assert!(pool.set_per_process_memory_fraction(f64::NAN).is_err());
    assert_eq!(pool.memory_cap(), Some(25 << 20));
    pool.set_per_process_memory_fraction(0.5).unwrap();
    let second = pool.alloc(20 << 20).unwrap();
    drop((first, second));
    assert_eq!(pool.memory_allocated(), 0);
    assert_eq!(pool.max_memory_allocated(), 40 << 20);
    assert_eq!(pool.max_memory_reserved(), 40 << 20);
    pool.reset_peak_stats();
    assert_eq!(pool.max_memory_allocated(), 0);
}

/// Issue 14, item 3: a label per allocation, in the snapshot, the summary and the leak
/// report, which the pool logs when its last handle drops with blocks still allocated.
#[test]
fn labels_name_blocks_in_the_snapshot_the_summary_and_the_leak_report() {
    let gpu = common::gpu();
    let log = common::captured_log();
    let options = PoolOptions::default()
        .with_label("labelled pool")
        .with_log_leaks(true);
    let config = Config::parse("policy:pytorch").unwrap();
    let pool = Pool::with_options(gpu.device(), gpu.queue(), config, options).unwrap();
    let weights = pool.alloc_labeled(4096, "weights").unwrap();
    let first = pool.alloc_labeled(1000, "activations").unwrap();
    let mut second = pool.alloc_labeled(1000, "activations").unwrap();
    let plain = pool.alloc(512).unwrap();
    assert_eq!((weights.label(), plain.label()), (Some("weights"), None));
    let snapshot = pool.snapshot();
    let labelled = |block: &Block| {
        snapshot
            .iter()
            .filter(|s| s.id == block.segment())
            .flat_map(|s| &s.blocks)
            .find(|b| b.offset == block.offset())
            .and_then(|b| b.label.clone())
    };
    assert_eq!(labelled(&weights).as_deref(), Some("weights"));
    assert_eq!(labelled(&second).as_deref(), Some("activations"));
    assert_eq!(labelled(&plain), None);
    let summary = pool.memory_summary();
    assert!(
        summary.contains("\"activations\": 2 blocks, 2.00 KiB"),
        "{summary}"
    );
    assert!(
        summary.contains("\"weights\": 1 block, 4.00 KiB"),
        "{summary}"
    );
    // A move keeps the label; a drop removes the block from the report.
    pool.offload(&mut second).unwrap();
    assert_eq!(second.label(), Some("activations"));
    drop(first);
    let report = pool.leak_report().expect("blocks are allocated");
    for needle in [
        "3 blocks (5.50 KiB) are still allocated",
        "\"activations\": 1 block (1.00 KiB)",
        "\"weights\": 1 block (4.00 KiB)",
        "unlabelled: 1 block (512 B)",
    ] {
        assert!(report.contains(needle), "report lacks `{needle}`: {report}");
    }
    // The last handle goes while blocks live on: the report is logged, naming the pool.
    drop(pool);
    let logged = log.lines();
    assert!(
        logged
            .iter()
            .any(|line| line.starts_with("labelled pool: 3 blocks") && line.contains("weights")),
        "{logged:?}"
    );
    drop((weights, second, plain));
}

#[test]
fn a_block_given_another_segments_record_reaches_its_own_buffer() {
    // 600 small blocks share one small segment (2 MiB); freed without having been exposed,
    // their records crowd the record shelf (more than half of its 1024), so blocks placed in
    // new large segments take those records and must swap in their own segment's handle.
    let gpu = common::gpu();
    let pool = pool(gpu, "expandable_segments:False");
    let probe = pool.alloc(512).unwrap();
    let small_buffer = probe.buffer().clone();
    let small: Vec<Block> = (0..600).map(|_| pool.alloc(512).unwrap()).collect();
    drop(small);
    let large: Vec<Block> = (0..3).map(|_| pool.alloc(2 << 20).unwrap()).collect();
    for (i, block) in large.iter().enumerate() {
        assert!(
            *block.buffer() != small_buffer,
            "block {i} kept the small segment's handle"
        );
        let data = pattern(40 + i as u32, block.size());
        pool.write(block, &data).unwrap();
        assert_eq!(pool.read(block).unwrap(), data, "block {i}");
    }
    drop(probe);
    pool.check_consistency().unwrap();
}

/// `reuse_cache`: on (by default under `policy:compact` in pages mode) a request takes the
/// block of its size dropped last, without the engine; off (by default in fixed segments and
/// under `policy:pytorch`) the engine places it: the best fit, lowest address first.
#[test]
fn the_reuse_cache_hands_back_the_last_dropped_block_and_off_the_engine_places() {
    let gpu = common::gpu();
    for (conf, on) in [
        ("expandable_segments:False", Some(false)),
        ("expandable_segments:False,reuse_cache:True", Some(true)),
        ("policy:pytorch", Some(false)),
        ("policy:pytorch,reuse_cache:True", Some(true)),
        // Pages mode where the adapter maps pages (the cache on), else fixed segments (off).
        ("expandable_segments:auto", None),
        ("expandable_segments:auto,reuse_cache:False", Some(false)),
    ] {
        let pool = pool(gpu, conf);
        let pages = pool.memory_mode() == MemoryMode::Pages;
        let takes_the_last = on.unwrap_or(pages);
        assert_eq!(pool.config().reuses_blocks(pages), takes_the_last, "{conf}");
        // Four blocks of the small kind side by side in one 2 MiB segment, the rest of it
        // free after them.
        let mut blocks: Vec<Option<Block>> = (0..4)
            .map(|_| Some(pool.alloc(256 << 10).unwrap()))
            .collect();
        let offsets: Vec<u64> = blocks.iter().flatten().map(Block::offset).collect();
        for pair in offsets.windows(2) {
            assert_eq!(pair[1], pair[0] + (256 << 10), "{conf}: {offsets:?}");
        }
        // The first and the third dropped: two free blocks of the size, neither with a free
        // neighbour; the engine's best fit is the first (lower address), the cache's the third
        // (dropped last).
        blocks[0] = None;
        blocks[2] = None;
        let next = pool.alloc(256 << 10).unwrap();
        let expected = if takes_the_last {
            offsets[2]
        } else {
            offsets[0]
        };
        assert_eq!(next.offset(), expected, "{conf}: {offsets:?}");
        drop(next);
        drop(blocks);
        // Either way the statistics count the five allocations and their frees.
        let allocation = pool.memory_stats().allocation.all;
        assert_eq!((allocation.allocated, allocation.freed), (5, 5), "{conf}");
    }
}
