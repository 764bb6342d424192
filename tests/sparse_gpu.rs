//! Page mapping on the GPU (Vulkan sparse binding), on the binary's shared device: lavapipe
//! 25 in CI (`scripts/setup-vulkan` installs it), 4 KiB pages and one queue.

// Page runs are arrays of byte ranges; a call with one run is an array of one range.
#![allow(clippy::single_range_in_vec_init)]

mod common;

use common::gpu;
use wgpool::gpu::sparse::{ChunkPolicy, PagedMemory, sparse_device};
use wgpool::gpu::transfer::read_region;
use wgpool::kernels::{KernelCall, Kernels, Operand, pattern_word};

const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// Small chunks, so that a few MiB already span several chunks and a bind has many entries.
fn small_chunks() -> ChunkPolicy {
    ChunkPolicy::default()
        .with_min_chunk(256 << 10)
        .with_max_chunk(256 << 10)
}

fn paged() -> PagedMemory {
    let ctx = gpu();
    PagedMemory::new(ctx.device(), ctx.queue(), USAGE, "test", small_chunks())
        .expect("the test device maps pages (lavapipe >= 25: run scripts/setup-vulkan)")
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

#[test]
fn headless_devices_map_pages() {
    let ctx = gpu();
    let sparse = sparse_device(ctx.device()).expect("GpuContext::headless enables sparse binding");
    let facts = sparse.facts();
    assert!(facts.page_size.is_power_of_two(), "{facts:?}");
    assert!(facts.address_space >= 1 << 30, "{facts:?}");
    assert!(facts.max_range_size >= 1 << 30, "{facts:?}");
    assert_eq!(ctx.page_mapping().unwrap().facts(), facts);
    // Vulkan 1.2 devices (lavapipe 25, NVIDIA) order binds with timeline semaphores.
    assert!(sparse.orders_on_gpu());
}

#[test]
fn a_kernel_writes_across_page_and_chunk_borders() {
    let ctx = gpu();
    let mut memory = paged();
    let page = memory.page_size();
    memory.reserve_range(0, 16 << 20).unwrap();
    // Sixteen 256 KiB chunks, one map each, then all unmapped: held, not bound.
    for i in 0..16u64 {
        memory
            .map(0, &[((8 << 20) + i * (256 << 10), 256 << 10)])
            .unwrap();
    }
    memory.unmap(0, &[(8 << 20, 4 << 20)]).unwrap();
    assert_eq!(memory.usage().chunks, 16);
    assert_eq!(memory.usage().mapped_bytes, 0);
    // 4 MiB from 1 MiB in one call: pages of all sixteen chunks, in one bind.
    let binds = memory.counters().bind_calls;
    memory.map(0, &[(1 << 20, 4 << 20)]).unwrap();
    assert_eq!(memory.counters().bind_calls, binds + 1);
    assert_eq!(memory.usage().mapped_bytes, 4 << 20);
    assert_eq!(memory.usage().device_bytes, 4 << 20);
    assert_eq!(memory.usage().chunks, 16);
    let buffer = memory.buffer(0).unwrap().clone();

    // 3 MiB starting 512 B into the mapped region and off every page border.
    let (offset, len) = ((1 << 20) + 512, 3 << 20);
    assert_ne!(offset % page, 0);
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    kernels
        .run(&KernelCall::fill_pattern(
            Operand::new(&buffer, offset, len),
            77,
        ))
        .unwrap();
    let data = read_region(ctx.device(), ctx.queue(), &buffer, offset, len).unwrap();
    let expected: Vec<u32> = (0..(len / 4) as u32).map(|i| pattern_word(77, i)).collect();
    assert_eq!(words(&data), expected);
    let sum = kernels
        .checksum(Operand::new(&buffer, offset, len))
        .unwrap();
    assert_eq!(sum, wgpool::kernels::checksum(&expected, 0));
}

#[test]
fn unmapped_memory_is_reused_and_neighbours_keep_their_data() {
    let ctx = gpu();
    let mut memory = paged();
    memory.reserve_range(3, 8 << 20).unwrap();
    memory.map(3, &[(0, 2 << 20)]).unwrap();
    assert_eq!(
        memory.counters().chunks.allocations,
        1,
        "one chunk of the map's size"
    );
    let buffer = memory.buffer(3).unwrap().clone();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    kernels
        .run(&KernelCall::fill_pattern(
            Operand::new(&buffer, 0, 2 << 20),
            5,
        ))
        .unwrap();
    // Unmap the middle 1 MiB (splitting the mapped extents), keep the rest.
    memory.unmap(3, &[(512 << 10, 1 << 20)]).unwrap();
    assert_eq!(memory.usage().mapped_bytes, 1 << 20);
    assert_eq!(
        memory.usage().device_bytes,
        2 << 20,
        "unmapped memory stays held"
    );
    assert!(memory.is_mapped(3, 0, 512 << 10));
    assert!(!memory.is_mapped(3, 0, 1 << 20));
    // Map elsewhere: the held memory is reused, no new chunk.
    memory.map(3, &[(4 << 20, 1 << 20)]).unwrap();
    assert_eq!(memory.usage().device_bytes, 2 << 20);
    assert_eq!(memory.counters().chunks.allocations, 1);
    for (start, len) in [(0u64, 512u64 << 10), (1536 << 10, 512 << 10)] {
        let data = read_region(ctx.device(), ctx.queue(), &buffer, start, len).unwrap();
        let first = (start / 4) as u32;
        let expected: Vec<u32> = (first..first + (len / 4) as u32)
            .map(|i| pattern_word(5, i))
            .collect();
        assert_eq!(words(&data), expected, "data at {start}");
    }
    // Unmapping what is not mapped, or a run off the pages, is refused and changes nothing.
    assert!(memory.unmap(3, &[(2 << 20, 4096)]).is_err());
    assert!(memory.map(3, &[(4 << 20, 4096)]).is_err(), "already mapped");
    assert!(memory.map(3, &[(100, 4096)]).is_err());
    assert!(
        memory.map(3, &[(8 << 20, 4096)]).is_err(),
        "outside the range"
    );
    assert_eq!(memory.usage().mapped_bytes, 2 << 20);

    // Everything unmapped: every chunk is idle, and release_idle frees them.
    memory.release_range(3).unwrap();
    assert_eq!(memory.usage().mapped_bytes, 0);
    assert_eq!(memory.usage().ranges, 0);
    assert_eq!(memory.release_idle(u64::MAX), 2 << 20);
    assert_eq!(memory.usage().device_bytes, 0);
    assert_eq!(memory.counters().chunks.frees, 1);
}

/// On a device whose only queue wgpu shares with the binds, wgpu's `vkQueueSubmit` is the
/// gated one; with a queue of the pool's own, wgpu keeps the driver's.
#[test]
fn wgpu_submits_through_the_gate_exactly_when_the_queue_is_shared() {
    use wgpu::hal::api::Vulkan;
    let ctx = gpu();
    let own_queue = ctx.page_mapping().unwrap().facts().own_queue;
    // SAFETY: only function pointers and handles are read.
    let (wgpu_submit, driver_submit) = unsafe {
        let device = ctx.device().as_hal::<Vulkan>().unwrap();
        let adapter = ctx.adapter().as_hal::<Vulkan>().unwrap();
        let raw = device.raw_device();
        let driver = adapter
            .shared_instance()
            .raw_instance()
            .get_device_proc_addr(raw.handle(), c"vkQueueSubmit".as_ptr())
            .unwrap();
        (raw.fp_v1_0().queue_submit as usize, driver as usize)
    };
    if own_queue {
        assert_eq!(
            wgpu_submit, driver_submit,
            "an own bind queue needs no gate"
        );
    } else {
        assert_ne!(wgpu_submit, driver_submit, "the shared queue must be gated");
    }
}

/// Application threads submit kernels and read back while this thread maps, writes, checks
/// and unmaps pages on the same device (on lavapipe: the same queue).
#[test]
fn binds_and_submissions_from_other_threads_stay_correct() {
    let ctx = gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    let check = |buffer: &wgpu::Buffer, offset: u64, len: u64, seed: u32| {
        kernels
            .run(&KernelCall::fill_pattern(
                Operand::new(buffer, offset, len),
                seed,
            ))
            .unwrap();
        let data = read_region(ctx.device(), ctx.queue(), buffer, offset, len).unwrap();
        let expected: Vec<u32> = (0..(len / 4) as u32)
            .map(|i| pattern_word(seed, i))
            .collect();
        assert_eq!(words(&data), expected, "seed {seed}");
    };
    const ROUNDS: u32 = 30;
    std::thread::scope(|scope| {
        for thread in 0..3u32 {
            let check = &check;
            scope.spawn(move || {
                let buffer = ctx.device().create_buffer(&wgpu::BufferDescriptor {
                    label: Some("app"),
                    size: 64 << 10,
                    usage: USAGE,
                    mapped_at_creation: false,
                });
                for round in 0..ROUNDS {
                    check(&buffer, 0, 64 << 10, 1000 * thread + round);
                }
            });
        }
        let mut memory = paged();
        memory.reserve_range(0, 8 << 20).unwrap();
        let buffer = memory.buffer(0).unwrap().clone();
        for round in 0..ROUNDS {
            let offset = (round as u64 % 16) * (512 << 10);
            memory.map(0, &[(offset, 256 << 10)]).unwrap();
            check(&buffer, offset + 512, (256 << 10) - 1024, 7 + round);
            memory.unmap(0, &[(offset, 256 << 10)]).unwrap();
        }
        assert_eq!(memory.counters().bind_calls, 2 * ROUNDS as u64);
    });
}

/// The engine's page operations: unmapped memory stays held, `release_held` frees whole
/// idle chunks (never more than the engine released), stranded memory is mapped again
/// before any new chunk, and failures come back with the right kind.
#[test]
fn the_segment_source_holds_unmapped_memory_and_frees_what_the_engine_releases() {
    use wgpool::engine::{SegmentId, SegmentKind, SegmentSource};
    let mut memory = paged();
    let mapping = memory.page_mapping().unwrap();
    let facts = memory.sparse().facts();
    assert_eq!(mapping.page, facts.page_size);
    // Usual ranges leave room for many pools; the largest is the device's largest buffer.
    assert_eq!(mapping.range, memory.range_size());
    assert!(
        mapping.range <= facts.address_space / 32,
        "{mapping:?} {facts:?}"
    );
    assert!(mapping.range >= 64 << 20, "{mapping:?}");
    assert_eq!(mapping.max_range, memory.max_range());
    assert!(
        mapping.max_range > facts.max_range_size / 2 && mapping.max_range <= facts.address_space,
        "{mapping:?} {facts:?}"
    );

    let id = SegmentId(1);
    SegmentSource::reserve_range(&mut memory, id, 4 << 20, SegmentKind::Large).unwrap();
    memory
        .map_pages(id, &[0..1 << 20, 2 << 20..3 << 20])
        .unwrap();
    assert_eq!(memory.counters().bind_calls, 1, "one bind per call");
    assert_eq!(memory.counters().chunks.allocations, 1);
    memory.unmap_pages(id, &[0..1 << 20]).unwrap();
    assert_eq!(
        memory.usage().device_bytes,
        2 << 20,
        "unmapped memory stays held"
    );
    // The chunk still backs mapped pages: nothing can be freed, and nothing more is.
    memory.release_held(1 << 20);
    assert_eq!(memory.usage().device_bytes, 2 << 20);
    // That stranded megabyte serves the next map: no new chunk.
    memory.map_pages(id, &[1 << 20..2 << 20]).unwrap();
    assert_eq!(memory.counters().chunks.allocations, 1);
    memory.unmap_pages(id, &[1 << 20..3 << 20]).unwrap();
    memory.release_held(2 << 20);
    assert_eq!(
        memory.usage().device_bytes,
        0,
        "every chunk idle and released"
    );
    SegmentSource::release_range(&mut memory, id, 4 << 20);
    assert_eq!(memory.usage().ranges, 0);

    // A fixed segment is a range of its own, wholly mapped, freed on release.
    memory
        .create_segment(SegmentId(2), 3 << 20, SegmentKind::Large)
        .unwrap();
    assert!(memory.is_mapped(2, 0, 3 << 20));
    memory.release_segment(SegmentId(2), 3 << 20);
    assert_eq!(memory.usage().device_bytes, 0);

    // Past the cap, and past the address space: out of memory, for the retry chain.
    memory.set_limit(Some(1 << 20));
    SegmentSource::reserve_range(&mut memory, id, 4 << 20, SegmentKind::Large).unwrap();
    let error = memory.map_pages(id, &[0..2 << 20]).unwrap_err();
    assert!(error.is_out_of_memory(), "{error}");
    assert!(!memory.is_mapped(1, 0, 4096), "a failed map maps nothing");
    let too_big = facts.address_space + facts.page_size;
    let error =
        SegmentSource::reserve_range(&mut memory, SegmentId(3), too_big, SegmentKind::Large)
            .unwrap_err();
    assert!(error.is_out_of_memory(), "{error}");
    // A run off the pages is a plain error: retrying cannot help.
    let error = memory.map_pages(id, &[100..4096]).unwrap_err();
    assert!(!error.is_out_of_memory(), "{error}");
}

/// A device created by plain `request_device` has no sparse binding: pools on it use fixed
/// segments, and say why in `memory_mode_reason` and the summary.
#[test]
fn pools_on_a_device_without_sparse_binding_use_fixed_segments() {
    use wgpool::config::Config;
    use wgpool::pool::{MemoryMode, Pool};
    let plain = common::own(|| {
        let adapter = gpu().adapter();
        pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .unwrap()
    });
    let (device, queue) = &*plain;
    let why = sparse_device(device).unwrap_err();
    assert!(why.reason.contains("request_device"), "{why}");
    let pool = Pool::new(device, queue, Config::default()).unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Segments);
    let block = pool.alloc(3 << 20).unwrap();
    pool.write(&block, &[9u8; 4096]).unwrap();
    assert_eq!(pool.read(&block).unwrap()[..4096], [9u8; 4096]);
    let usage = pool.device_memory_usage();
    assert_eq!(usage.mode, MemoryMode::Segments);
    assert_eq!(usage.device_bytes, pool.memory_reserved());
    assert_eq!(usage.allocations, 1);
    assert!(pool.memory_summary().contains("memory mode: segments"));
}

/// Address space is one per device and shared by its pools. Where a range of the usual size
/// no longer fits, a pool takes a range of just the request's size; where not even that
/// fits, the request is an out-of-memory error that names the address space, and it is
/// served once the space is given back.
#[test]
fn pools_take_ranges_of_the_requests_size_when_address_space_is_short() {
    use wgpool::config::Config;
    use wgpool::engine::AllocError;
    use wgpool::gpu::{GpuContext, HeadlessOptions};
    use wgpool::pool::{MemoryMode, Pool};
    // A device of its own: the test fills its address space.
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let ctx = &*own;
    let facts = ctx.page_mapping().unwrap().facts();
    let mut hog =
        PagedMemory::new(ctx.device(), ctx.queue(), USAGE, "hog", small_chunks()).unwrap();
    // Leave 4 MiB of address space, less than a usual range.
    let left = 4 << 20;
    let taken = (facts.address_space - left).min(hog.max_range());
    hog.reserve_range(0, taken).unwrap();
    let left = facts.address_space - taken;
    let pool = Pool::from_context(ctx, Config::default()).unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    let small = pool.alloc(4096).unwrap();
    let large = pool.alloc(1 << 20).unwrap();
    pool.write(&small, &[1; 4096]).unwrap();
    pool.write(&large, &vec![2; 1 << 20]).unwrap();
    assert_eq!(pool.read(&small).unwrap(), vec![1; 4096]);
    assert_eq!(pool.read(&large).unwrap(), vec![2; 1 << 20]);
    // Nothing of the usual size fit: each range is its block's size in whole pages.
    assert!(small.buffer().size() < 1 << 20, "{}", small.buffer().size());
    assert_eq!(large.buffer().size(), 1 << 20);
    assert!(small.buffer().size() + large.buffer().size() <= left);
    let error = pool.alloc(left).unwrap_err();
    assert!(matches!(error, AllocError::OutOfMemory(_)), "{error}");
    assert!(
        error
            .to_string()
            .contains("sparse address space is exhausted"),
        "{error}"
    );
    hog.release_range(0).unwrap();
    let served = pool.alloc(left).unwrap();
    assert_ne!(served.buffer(), large.buffer(), "a new, usual range");
    assert_eq!(pool.read(&large).unwrap(), vec![2; 1 << 20]);
    drop((small, large, served));
    pool.check_consistency().unwrap();
}

/// On a device with sparse binding (the test device), a pool of the default configuration
/// maps pages and says so in `memory_mode_reason`, its device memory and the summary;
/// `expandable_segments:False` keeps fixed segments and says that.
#[test]
fn pools_on_a_device_with_sparse_binding_map_pages_by_default() {
    use wgpool::config::Config;
    use wgpool::pool::{MemoryMode, Pool};
    let ctx = gpu();
    let pool = Pool::from_context(ctx, Config::default()).unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    assert!(
        pool.memory_mode_reason().contains("sparse binding"),
        "{}",
        pool.memory_mode_reason()
    );
    let block = pool.alloc(3 << 20).unwrap();
    pool.write(&block, &[7u8; 4096]).unwrap();
    assert_eq!(pool.read(&block).unwrap()[..4096], [7u8; 4096]);
    assert_eq!(pool.device_memory_usage().mode, MemoryMode::Pages);
    let summary = pool.memory_summary();
    assert!(
        summary.contains("policy:compact, memory mode: pages")
            && summary.contains("memory mode: pages ("),
        "{summary}"
    );

    let fixed =
        Pool::from_context(ctx, Config::parse("expandable_segments:False").unwrap()).unwrap();
    assert_eq!(fixed.memory_mode(), MemoryMode::Segments);
    assert!(
        fixed
            .memory_summary()
            .contains("memory mode: segments (expandable_segments:False)"),
        "{}",
        fixed.memory_summary()
    );
}
