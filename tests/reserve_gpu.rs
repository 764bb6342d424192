//! The page reserve (issue 21, item 3): chunks of device memory allocated ahead of demand on
//! a thread of the pages-mode memory's own, on the binary's shared device (lavapipe 25 in
//! CI, 4 KiB pages).
//!
//! Maps take ready chunks and data stays intact through them; no chunk outlives the memory,
//! even with an allocation in flight at drop; the reserve stays within the limit and is
//! freed by `release_idle` and `empty_cache`; without it nothing is allocated ahead. (A
//! background allocation that fails stops the reserve: lavapipe grants any size, so that is
//! tested with a stand-in driver in `src/gpu/sparse/reserve.rs`.)
//!
//! The device counts the chunks every pool on it holds ([`SparseDevice::live_chunks`]), so
//! the tests here take turns: none allocates while another counts.

mod common;

use std::sync::{Mutex, MutexGuard};

use common::{gpu, pattern_bytes};
use wgpool::config::Config;
use wgpool::gpu::sparse::{ChunkPolicy, PagedMemory, SparseDevice, sparse_device};
use wgpool::gpu::transfer::read_region;
use wgpool::kernels::{KernelCall, Kernels, Operand, pattern_word};
use wgpool::pool::{MemoryMode, Pool, PoolOptions};

const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);
const CHUNK: u64 = 256 << 10;

static TURNS: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURNS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn sparse() -> SparseDevice {
    sparse_device(gpu().device())
        .expect("the test device maps pages (lavapipe >= 25: run scripts/setup-vulkan)")
}

/// Chunks of exactly 256 KiB, and no spare pages bound after a map, so that every figure
/// below is a whole number of chunks. With no device floor, the preferred chunk with and
/// without it is one chunk: a reserve of `n` fills the free pages and the reserve up to
/// `n + 1` chunks after each map that grew.
fn fixed_chunks() -> ChunkPolicy {
    ChunkPolicy::default()
        .with_min_chunk(CHUNK)
        .with_max_chunk(CHUNK)
        .with_device_divisor(0)
        .with_granule(CHUNK)
        .with_spare_on_large(false)
        .with_bind_spare(false)
}

/// Memory with a reserve of `chunks` chunks and one 16 MiB range.
fn reserved(chunks: u32) -> PagedMemory {
    let ctx = gpu();
    let mut memory =
        PagedMemory::new(ctx.device(), ctx.queue(), USAGE, "reserve", fixed_chunks()).unwrap();
    memory.set_reserve(chunks);
    memory.reserve_range(0, 16 << 20).unwrap();
    memory
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

/// The first map allocates on its own thread and orders the reserve (two chunks: the one
/// the pool may leave unused anyway, and one more); the maps after it take ready chunks (no
/// allocation of their own) and the reserve is ordered again each time. A kernel writes
/// across the chunks and every byte reads back.
#[test]
fn maps_take_ready_chunks_and_the_data_stays_intact() {
    let _turn = turn();
    let ctx = gpu();
    let mut memory = reserved(1);
    memory.map(0, &[(0, CHUNK)]).unwrap();
    let counters = memory.counters().chunks;
    // The reserve's thread may already have allocated: count the map's own allocations.
    assert_eq!(
        (
            counters.allocations - counters.background_allocations,
            counters.reserve_taken
        ),
        (1, 0),
        "the map allocated its chunk itself: nothing to take yet"
    );
    memory.settle_reserve();
    let usage = memory.usage();
    assert_eq!(usage.reserve_bytes, 2 * CHUNK, "two chunks ahead");
    assert_eq!(
        usage.device_bytes,
        3 * CHUNK,
        "the reserve is device memory"
    );
    assert_eq!(memory.counters().chunks.background_allocations, 2);

    for i in 1..4u64 {
        memory.settle_reserve();
        memory.map(0, &[(i * CHUNK, CHUNK)]).unwrap();
        let counters = memory.counters().chunks;
        assert_eq!(counters.reserve_taken, i, "map {i} took the ready chunk");
        assert_eq!(
            counters.allocations - counters.background_allocations,
            1,
            "only the first map allocated on its own thread"
        );
    }
    memory.settle_reserve();
    assert_eq!(memory.usage().chunks, 4);
    assert_eq!(memory.usage().device_bytes, 6 * CHUNK);
    assert_eq!(memory.device_bytes_peak(), 6 * CHUNK);

    // 900 KiB from 100 KiB on: across all four chunks, off every page border.
    let buffer = memory.buffer(0).unwrap().clone();
    let (offset, len) = ((100 << 10) + 512, 900 << 10);
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    kernels
        .run(&KernelCall::fill_pattern(
            Operand::new(&buffer, offset, len),
            31,
        ))
        .unwrap();
    let data = read_region(ctx.device(), ctx.queue(), &buffer, offset, len).unwrap();
    let expected: Vec<u32> = (0..(len / 4) as u32).map(|i| pattern_word(31, i)).collect();
    assert_eq!(words(&data), expected);
}

/// A map larger than the reserve takes it and allocates only the rest on its own thread.
#[test]
fn a_map_larger_than_the_reserve_takes_it_and_allocates_the_rest() {
    let _turn = turn();
    let mut memory = reserved(1);
    memory.map(0, &[(0, CHUNK)]).unwrap();
    memory.settle_reserve();
    memory.map(0, &[(CHUNK, 4 * CHUNK)]).unwrap();
    let counters = memory.counters().chunks;
    assert_eq!(counters.reserve_taken, 2, "both ready chunks");
    assert_eq!(
        counters.allocations - counters.background_allocations,
        2,
        "the first map's chunk, and one for the two chunks the reserve lacked"
    );
    memory.settle_reserve();
    assert_eq!(memory.usage().mapped_bytes, 5 * CHUNK);
    assert_eq!(memory.usage().device_bytes, 7 * CHUNK, "5 mapped, 2 ahead");
}

/// Every chunk, the reserve's included, is freed: by `release_idle` once nothing is
/// mapped (allocations then equal frees), and at drop even with an allocation ordered or in
/// flight.
#[test]
fn no_chunk_outlives_the_memory() {
    let _turn = turn();
    let sparse = sparse();
    let before = sparse.live_chunks();
    let mut memory = reserved(2);
    for i in 0..6u64 {
        memory.map(0, &[(i * CHUNK, CHUNK)]).unwrap();
    }
    memory.settle_reserve();
    let counters = memory.counters().chunks;
    assert_eq!(
        sparse.live_chunks() - before,
        counters.allocations - counters.frees
    );
    assert_eq!(memory.usage().reserve_bytes, 3 * CHUNK);
    memory.unmap(0, &[(0, 6 * CHUNK)]).unwrap();
    assert_eq!(memory.release_idle(u64::MAX), 6 * CHUNK);
    let counters = memory.counters().chunks;
    assert_eq!(counters.allocations, counters.frees, "{counters:?}");
    assert_eq!(memory.usage().device_bytes, 0);
    assert_eq!(sparse.live_chunks(), before);

    // Dropped right after maps that ordered the reserve: the thread is joined, and what it
    // allocated is freed.
    for round in 0..8u64 {
        let mut memory = reserved(2);
        for i in 0..=round % 3 {
            memory.map(0, &[(i * CHUNK, CHUNK)]).unwrap();
        }
        drop(memory);
        assert_eq!(sparse.live_chunks(), before, "round {round}");
    }
}

/// The reserve counts in the limit: it is ordered only where the limit leaves room, a map
/// may use it and the room left together, the peak never passes the limit, and lowering
/// the limit under what is held frees it.
#[test]
fn the_reserve_stays_within_the_limit() {
    let _turn = turn();
    let mut memory = reserved(2);
    memory.set_limit(Some(3 * CHUNK));
    memory.map(0, &[(0, CHUNK)]).unwrap();
    memory.settle_reserve();
    assert_eq!(memory.usage().reserve_bytes, 2 * CHUNK, "room for two");
    // Two chunks: both from the reserve; nothing more fits under the limit.
    memory.map(0, &[(CHUNK, 2 * CHUNK)]).unwrap();
    memory.settle_reserve();
    assert_eq!(memory.counters().chunks.reserve_taken, 2);
    assert_eq!(memory.usage().reserve_bytes, 0, "no room left");
    assert_eq!(memory.usage().device_bytes, 3 * CHUNK);
    let error = memory.map(0, &[(3 * CHUNK, CHUNK)]).unwrap_err();
    assert!(error.is_out_of_memory(), "{error}");
    assert_eq!(memory.device_bytes_peak(), 3 * CHUNK);

    // Room for one more: the reserve takes it; a lower limit frees it.
    memory.set_limit(Some(5 * CHUNK));
    memory.map(0, &[(3 * CHUNK, CHUNK)]).unwrap();
    memory.settle_reserve();
    assert_eq!(memory.usage().reserve_bytes, CHUNK);
    assert_eq!(memory.usage().device_bytes, 5 * CHUNK);
    memory.set_limit(Some(4 * CHUNK));
    assert_eq!(memory.usage().reserve_bytes, 0);
    assert_eq!(memory.usage().device_bytes, 4 * CHUNK);
    assert!(memory.device_bytes_peak() <= 5 * CHUNK);
}

/// `release_idle` frees the reserve where it frees a chunk, keeps it where it frees none
/// while chunks are in use, and `release_reserve` frees it outright.
#[test]
fn releasing_memory_frees_the_reserve() {
    let _turn = turn();
    let mut memory = reserved(1);
    memory.map(0, &[(0, CHUNK)]).unwrap();
    memory.map(0, &[(CHUNK, CHUNK)]).unwrap();
    memory.settle_reserve();
    assert_eq!(memory.usage().reserve_bytes, 2 * CHUNK);
    // Both chunks hold mapped pages: nothing is freed, and the reserve stays.
    assert_eq!(memory.release_idle(u64::MAX), 0);
    assert_eq!(memory.usage().reserve_bytes, 2 * CHUNK);
    assert_eq!(memory.release_reserve(), 2 * CHUNK);
    assert_eq!(memory.usage().device_bytes, 2 * CHUNK);
    // It fills again after the next chunk a map needs.
    memory.map(0, &[(2 * CHUNK, CHUNK)]).unwrap();
    memory.settle_reserve();
    assert_eq!(memory.usage().reserve_bytes, 2 * CHUNK);
    memory.unmap(0, &[(CHUNK, CHUNK)]).unwrap();
    assert_eq!(memory.release_idle(u64::MAX), CHUNK);
    assert_eq!(memory.usage().reserve_bytes, 0, "freed with the idle chunk");
    assert_eq!(memory.usage().device_bytes, 2 * CHUNK);
}

/// Without a reserve (the default of `PagedMemory::new`) every chunk is allocated by the
/// map that needs it and nothing is held ahead.
#[test]
fn without_a_reserve_nothing_is_allocated_ahead() {
    let _turn = turn();
    let mut memory = reserved(0);
    for i in 0..4u64 {
        memory.map(0, &[(i * CHUNK, CHUNK)]).unwrap();
    }
    let counters = memory.counters().chunks;
    assert_eq!(counters.allocations, 4);
    assert_eq!(
        (counters.background_allocations, counters.reserve_taken),
        (0, 0)
    );
    assert_eq!(memory.usage().reserve_bytes, 0);
    assert_eq!(memory.usage().device_bytes, 4 * CHUNK);
    assert_eq!(memory.device_bytes_peak(), 4 * CHUNK);
}

/// Through a pool: `page_reserve_chunks:1` fills the reserve, blocks written through it
/// read back, `empty_cache` gives every byte back, and the default (0) allocates nothing
/// ahead.
#[test]
fn pools_reserve_when_asked_and_empty_cache_frees_it() {
    let _turn = turn();
    let ctx = gpu();
    let sparse = sparse();
    let before = sparse.live_chunks();
    for (conf, reserve) in [("page_reserve_chunks:1", true), ("", false)] {
        let config = Config::parse(&format!("expandable_segments:True,{conf}")).unwrap();
        assert_eq!(config.page_reserve_chunks, u32::from(reserve));
        let pool = Pool::with_options(
            ctx.device(),
            ctx.queue(),
            config,
            PoolOptions::default().with_chunk_policy(fixed_chunks()),
        )
        .unwrap();
        assert_eq!(pool.memory_mode(), MemoryMode::Pages);
        let blocks: Vec<_> = (0..6u32)
            .map(|i| {
                let size = 3 * CHUNK / 2 + u64::from(i) * 4096;
                // Time for the reserve's thread to allocate what the last block ordered
                // (microseconds on lavapipe): a pool has no call to wait for it.
                std::thread::sleep(std::time::Duration::from_millis(50));
                let block = pool.alloc(size).unwrap();
                let data = pattern_bytes(40 + i, size);
                pool.write(&block, &data).unwrap();
                (block, data)
            })
            .collect();
        for (block, data) in &blocks {
            assert_eq!(&pool.read(block).unwrap(), data, "{conf}");
        }
        let usage = pool.device_memory_usage();
        assert_eq!(
            usage.background_allocations > 0,
            reserve,
            "{conf}: {usage:?}"
        );
        assert_eq!(usage.reserve_taken > 0, reserve, "{conf}: {usage:?}");
        drop(blocks);
        pool.empty_cache();
        let usage = pool.device_memory_usage();
        assert_eq!(usage.device_bytes, 0, "{conf}: {usage:?}");
        assert_eq!(usage.allocations, usage.frees, "{conf}: {usage:?}");
        assert_eq!(sparse.live_chunks(), before, "{conf}");
    }
}
