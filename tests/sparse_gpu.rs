//! Page mapping on the GPU (Vulkan sparse binding), on the binary's shared device: lavapipe
//! 25 in CI (`scripts/setup-vulkan` installs it), 4 KiB pages and one queue.
//!
//! The pages-mode memory itself, then pools in pages mode through the `Pool` API (issue 10,
//! item 3): data across page borders, growth and shrinking while kernels run, a block over
//! the binding limit used through windows, short address space, and the fallback to fixed
//! segments. Reuse in submission order, a cap reached and recovered from, and many threads
//! run in both modes in `pool_gpu.rs`; the stress test runs in pages mode.

// Page runs are arrays of byte ranges; a call with one run is an array of one range.
#![allow(clippy::single_range_in_vec_init)]

mod common;

use common::gpu;
use common::pattern_bytes;
use wgpool::config::Config;
use wgpool::gpu::sparse::{ChunkPolicy, PagedMemory, sparse_device};
use wgpool::gpu::transfer::read_region;
use wgpool::kernels::{Dtype, KernelCall, Kernels, Operand, pattern_word};
use wgpool::pool::{
    BindingAccess, BindingError, Block, BlockBindings, MemoryMode, Pool, PoolOptions,
};

const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// Small chunks, so that a few MiB already span several chunks and a bind has many entries;
/// a map larger than a chunk gets one chunk of its size.
/// A device of the test's own (so that no other test's binds join its queue) and its
/// page-mapping side.
fn own_sparse_device() -> (
    common::Own<wgpool::gpu::GpuContext>,
    wgpool::gpu::sparse::SparseDevice,
) {
    use wgpool::gpu::{GpuContext, HeadlessOptions};
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let sparse = sparse_device(own.device()).unwrap();
    (own, sparse)
}

fn small_chunks() -> ChunkPolicy {
    ChunkPolicy::default()
        .with_min_chunk(256 << 10)
        .with_max_chunk(256 << 10)
        .with_granule(256 << 10)
        .with_spare_on_large(false)
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
    // Sixteen 256 KiB chunks, one map each, then all unmapped: kept in chunks, not bound.
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

/// A map larger than the preferred chunk allocates its shortfall plus a preferred chunk, in
/// whole granules, in one call; the maps after it use those spare pages before allocating.
#[test]
fn a_large_map_leaves_spare_pages_for_the_maps_after_it() {
    let ctx = gpu();
    let policy = ChunkPolicy::default()
        .with_min_chunk(1 << 20)
        .with_max_chunk(1 << 20)
        .with_granule(512 << 10);
    let mut memory = PagedMemory::new(ctx.device(), ctx.queue(), USAGE, "spare", policy).unwrap();
    let page = memory.page_size();
    memory.reserve_range(0, 16 << 20).unwrap();
    memory.map(0, &[(0, (5 << 20) + page)]).unwrap();
    assert_eq!(memory.counters().chunks.allocations, 1);
    // 5 MiB and a page, plus 1 MiB, in 512 KiB granules.
    assert_eq!(memory.usage().device_bytes, 13 << 19);
    memory.map(0, &[(8 << 20, 1 << 20)]).unwrap();
    assert_eq!(
        memory.counters().chunks.allocations,
        1,
        "served by spare pages"
    );
    // Under 1 MiB is left: the next map takes one preferred chunk.
    memory.map(0, &[(10 << 20, 1 << 20)]).unwrap();
    assert_eq!(memory.counters().chunks.allocations, 2);
    assert_eq!(memory.usage().device_bytes, 15 << 19);
    memory.release_range(0).unwrap();
    assert_eq!(memory.release_idle(u64::MAX), 15 << 19);
    assert_eq!(memory.usage().device_bytes, 0);
}

/// Memory with chunks of exactly 4 MiB, two ranges of 16 MiB reserved, and the first MiB of
/// range 0 mapped: one chunk, its other 3 MiB spare behind range 0.
fn one_mib_mapped_in_a_4_mib_chunk() -> PagedMemory {
    const MIB: u64 = 1 << 20;
    let ctx = gpu();
    let policy = ChunkPolicy::default()
        .with_min_chunk(4 * MIB)
        .with_max_chunk(4 * MIB)
        .with_device_divisor(0)
        .with_granule(MIB)
        .with_spare_on_large(false);
    let mut memory = PagedMemory::new(ctx.device(), ctx.queue(), USAGE, "spare", policy).unwrap();
    memory.reserve_range(0, 16 * MIB).unwrap();
    memory.reserve_range(1, 16 * MIB).unwrap();
    memory.map(0, &[(0, MIB)]).unwrap();
    memory
}

/// After a map, free pages of the chunks are bound as spare right after its end: the next
/// map there takes them with no bind call and its data is intact; a map in another range
/// that needs their memory unbinds them in its own single call; `release_idle` unbinds the
/// rest before freeing chunks.
#[test]
fn spare_pages_serve_the_next_map_without_a_bind_call() {
    const MIB: u64 = 1 << 20;
    let ctx = gpu();
    let mut memory = one_mib_mapped_in_a_4_mib_chunk();
    let usage = memory.usage();
    assert_eq!((usage.device_bytes, usage.mapped_bytes), (4 * MIB, MIB));
    assert_eq!(
        usage.spare_bytes,
        3 * MIB,
        "the chunk's other pages, after the map"
    );
    assert_eq!(memory.counters().bind_calls, 1);
    assert!(
        !memory.is_mapped(0, MIB, 4096),
        "spare pages are not mapped"
    );

    memory.map(0, &[(MIB, 2 * MIB)]).unwrap();
    assert_eq!(memory.counters().bind_calls, 1, "no call for spare pages");
    assert_eq!(memory.counters().maps_from_spare, 1);
    assert_eq!(memory.usage().spare_bytes, MIB);
    assert!(memory.is_mapped(0, 0, 3 * MIB));
    let buffer = memory.buffer(0).unwrap().clone();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    kernels
        .run(&KernelCall::fill_pattern(
            Operand::new(&buffer, 0, 3 * MIB),
            4,
        ))
        .unwrap();
    let expected: Vec<u32> = (0..(3 * MIB / 4) as u32)
        .map(|i| pattern_word(4, i))
        .collect();
    let read = |buffer: &wgpu::Buffer| {
        words(&read_region(ctx.device(), ctx.queue(), buffer, 0, 3 * MIB).unwrap())
    };
    assert_eq!(read(&buffer), expected);

    // Range 1 needs 2 MiB: range 0's spare megabyte comes back and one chunk more is
    // allocated, in one bind call that also unbinds the spare pages. The 3 MiB left free
    // are two runs (range 0's old spare megabyte in the first chunk, 2 MiB in the second):
    // spare pages come from one run, the longer.
    memory.map(1, &[(0, 2 * MIB)]).unwrap();
    assert_eq!(memory.counters().bind_calls, 2);
    assert_eq!(memory.counters().chunks.allocations, 2);
    assert_eq!(memory.usage().device_bytes, 8 * MIB);
    assert_eq!(
        memory.usage().spare_bytes,
        2 * MIB,
        "now after range 1's map, from one free run"
    );
    assert_eq!(memory.counters().spare_bound_bytes_total, 5 * MIB);
    let other = memory.buffer(1).unwrap().clone();
    kernels
        .run(&KernelCall::fill_pattern(
            Operand::new(&other, 0, 2 * MIB),
            9,
        ))
        .unwrap();
    assert_eq!(read(&buffer), expected, "range 0 kept its data");
    // Both chunks hold mapped pages: releasing unbinds no spare page and frees nothing.
    let calls = memory.counters().bind_calls;
    assert_eq!(memory.release_idle(u64::MAX), 0);
    assert_eq!(memory.counters().bind_calls, calls);
    assert_eq!(memory.usage().spare_bytes, 2 * MIB);

    memory.unmap(0, &[(0, 3 * MIB)]).unwrap();
    memory.unmap(1, &[(0, 2 * MIB)]).unwrap();
    assert_eq!(memory.idle_bytes(), 8 * MIB, "free and spare pages");
    assert_eq!(memory.release_idle(u64::MAX), 8 * MIB);
    assert_eq!(memory.usage().spare_bytes, 0);
    assert_eq!(memory.usage().device_bytes, 0);
}

/// A map that fails for lack of memory (the cap) after taking spare pages back from another
/// range changes nothing: the spare pages are where they were, and the next map there still
/// needs no bind call.
#[test]
fn a_failed_map_puts_the_spare_pages_it_took_back() {
    const MIB: u64 = 1 << 20;
    let mut memory = one_mib_mapped_in_a_4_mib_chunk();
    assert_eq!(memory.usage().spare_bytes, 3 * MIB);
    memory.set_limit(Some(4 * MIB));
    let before = (memory.usage(), memory.counters());
    // 5 MiB: the 3 spare MiB are not enough, and the cap allows no chunk more.
    let error = memory.map(1, &[(0, 5 * MIB)]).unwrap_err();
    assert!(error.is_out_of_memory(), "{error}");
    assert_eq!(
        (memory.usage(), memory.counters()),
        before,
        "nothing changed"
    );
    assert!(!memory.is_mapped(1, 0, 4096));
    // The spare pages are back behind range 0: the map there needs no call.
    memory.map(0, &[(MIB, 3 * MIB)]).unwrap();
    assert_eq!(memory.counters().bind_calls, before.1.bind_calls);
    assert_eq!(memory.counters().maps_from_spare, 1);
    assert_eq!(memory.usage().spare_bytes, 0);
    memory.release_range(0).unwrap();
    memory.release_range(1).unwrap();
    assert_eq!(memory.release_idle(u64::MAX), 4 * MIB);
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
        "unmapped memory stays spare"
    );
    assert!(memory.is_mapped(3, 0, 512 << 10));
    assert!(!memory.is_mapped(3, 0, 1 << 20));
    // Map elsewhere: the spare memory is reused, no new chunk.
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

/// An unmap queued for a shared call (`set_bind_batch`) gives its memory back at once: a map
/// queued after it reuses that memory with no new chunk, both reach the driver in the next
/// wgpu submission's call, and every mapped byte, old and new, reads back as written. On a
/// device of its own, so that no other pool's binds join the queue.
#[test]
fn queued_unmaps_hand_their_memory_to_later_maps_and_neighbours_keep_their_data() {
    common::within(
        std::time::Duration::from_secs(120),
        queued_unmaps_hand_their_memory_on,
    );
}

fn queued_unmaps_hand_their_memory_on() {
    let (own, sparse) = own_sparse_device();
    let kernels = Kernels::new(own.device(), own.queue());
    let mut memory =
        PagedMemory::new(own.device(), own.queue(), USAGE, "recycled", small_chunks()).unwrap();
    memory.set_bind_batch(16);
    // No work submitted but what this test declares: unbinds share one signal.
    let clock = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    memory.set_work_clock(clock.clone());
    memory.reserve_range(0, 8 << 20).unwrap();
    let buffer = memory.buffer(0).unwrap().clone();
    let fill = |offset: u64, len: u64, seed: u32| {
        kernels
            .run(&KernelCall::fill_pattern(
                Operand::new(&buffer, offset, len),
                seed,
            ))
            .unwrap();
    };
    let check = |offset: u64, len: u64, seed: u32, first_word: u32| {
        let data = read_region(own.device(), own.queue(), &buffer, offset, len).unwrap();
        let expected: Vec<u32> = (first_word..first_word + (len / 4) as u32)
            .map(|i| pattern_word(seed, i))
            .collect();
        assert_eq!(words(&data), expected, "{len} bytes at {offset}");
    };
    memory.map(0, &[(0, 2 << 20)]).unwrap();
    fill(0, 2 << 20, 5);
    clock.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let calls = (memory.counters().bind_calls, sparse.bind_calls_at_submit());
    // Unmap the middle 1 MiB and map 1 MiB elsewhere: the map takes the unmapped memory.
    memory.unmap(0, &[(512 << 10, 1 << 20)]).unwrap();
    memory.map(0, &[(4 << 20, 1 << 20)]).unwrap();
    assert_eq!(memory.counters().chunks.allocations, 1, "no new chunk");
    assert_eq!(memory.counters().unmaps_queued, 1);
    assert_eq!(
        memory.counters().bind_calls,
        calls.0,
        "both wait on the device"
    );
    fill(4 << 20, 1 << 20, 9);
    assert_eq!(
        sparse.bind_calls_at_submit(),
        calls.1 + 1,
        "the fill's submission sent both in one call"
    );
    check(0, 512 << 10, 5, 0);
    check(1536 << 10, 512 << 10, 5, (1536 << 10) / 4);
    check(4 << 20, 1 << 20, 9, 0);
    // And back: unmap the new run, map the hole again, in one queue.
    clock.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    memory.unmap(0, &[(4 << 20, 1 << 20)]).unwrap();
    memory.map(0, &[(512 << 10, 1 << 20)]).unwrap();
    assert_eq!(
        memory.counters().chunks.allocations,
        1,
        "still no new chunk"
    );
    fill(512 << 10, 1 << 20, 11);
    check(0, 512 << 10, 5, 0);
    check(512 << 10, 1 << 20, 11, 0);
    check(1536 << 10, 512 << 10, 5, (1536 << 10) / 4);
    assert_eq!(memory.counters().unmaps_queued, 2);
    memory.release_range(0).unwrap();
    assert_eq!(
        memory.release_idle(u64::MAX),
        2 << 20,
        "the chunk goes back whole"
    );
}

/// An unmap that needs a new signal of the GPU's work submits the queued binds first; when
/// that submission fails (made to fail here: no device fails on demand), the unmap returns
/// the driver's error and changes nothing: its pages stay mapped with their bytes, and the
/// queued map stays queued for the next call. On a device of its own.
#[test]
fn an_unmap_whose_queue_submission_fails_changes_nothing() {
    common::within(
        std::time::Duration::from_secs(120),
        an_unmap_whose_queue_submission_fails,
    );
}

fn an_unmap_whose_queue_submission_fails() {
    let (own, sparse) = own_sparse_device();
    let kernels = Kernels::new(own.device(), own.queue());
    let mut memory =
        PagedMemory::new(own.device(), own.queue(), USAGE, "failing", small_chunks()).unwrap();
    memory.set_bind_batch(16);
    memory.reserve_range(0, 8 << 20).unwrap();
    let buffer = memory.buffer(0).unwrap().clone();
    const RUN: u64 = 256 << 10;
    memory.map(0, &[(0, RUN)]).unwrap();
    kernels
        .run(&KernelCall::fill_pattern(Operand::new(&buffer, 0, RUN), 3))
        .unwrap();
    memory.map(0, &[(2 * RUN, RUN)]).unwrap();
    let before = memory.counters();
    sparse.fail_next_bind_submissions(1);
    let error = memory.unmap(0, &[(0, RUN)]).unwrap_err();
    assert!(
        error.to_string().to_lowercase().contains("memory"),
        "the driver's error: {error}"
    );
    let after = memory.counters();
    assert!(memory.is_mapped(0, 0, RUN), "the unmap changed nothing");
    assert_eq!(after.unmaps_queued, before.unmaps_queued);
    assert_eq!(
        after.unbind_signals, before.unbind_signals,
        "no signal was made"
    );
    assert_eq!(
        after.bind_calls, before.bind_calls,
        "the failed call bound nothing"
    );
    // The queued map is still queued: the next submission binds it, and both runs work.
    kernels
        .run(&KernelCall::fill_pattern(
            Operand::new(&buffer, 2 * RUN, RUN),
            4,
        ))
        .unwrap();
    for (offset, seed) in [(0, 3u32), (2 * RUN, 4)] {
        let data = read_region(own.device(), own.queue(), &buffer, offset, RUN).unwrap();
        let expected: Vec<u32> = (0..(RUN / 4) as u32)
            .map(|i| pattern_word(seed, i))
            .collect();
        assert_eq!(words(&data), expected, "run at {offset}");
    }
    // And the unmap works once the driver does.
    memory.unmap(0, &[(0, RUN)]).unwrap();
    assert!(!memory.is_mapped(0, 0, RUN));
    assert_eq!(memory.counters().unmaps_queued, before.unmaps_queued + 1);
}

/// wgpu's `vkQueueSubmit` on a device that maps pages is always the gated one: it submits
/// the maps pools queued first (and where wgpu's queue is the bind queue, it also excludes
/// the binds).
#[test]
fn wgpu_submits_through_the_gate_on_a_page_mapping_device() {
    use wgpu::hal::api::Vulkan;
    let ctx = gpu();
    assert!(ctx.page_mapping().is_ok());
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
    assert_ne!(wgpu_submit, driver_submit, "wgpu's queue must be gated");
}

/// Application threads submit kernels and read back while this thread maps, writes, checks
/// and unmaps pages on the same device (on lavapipe: the same queue), with each map bound in
/// a call of its own and with maps queued for a shared call: then the application threads'
/// submissions bind them too, and every check still finds its pages bound.
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
    for batch in [1u32, 8] {
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
            memory.set_bind_batch(batch);
            memory.reserve_range(0, 8 << 20).unwrap();
            let buffer = memory.buffer(0).unwrap().clone();
            for round in 0..ROUNDS {
                let offset = (round as u64 % 16) * (512 << 10);
                memory.map(0, &[(offset, 256 << 10)]).unwrap();
                check(&buffer, offset + 512, (256 << 10) - 1024, 7 + round);
                memory.unmap(0, &[(offset, 256 << 10)]).unwrap();
            }
            let counters = memory.counters();
            if batch == 1 {
                // A map and an unmap per round, each a call of its own; an unmap may also
                // submit maps other tests' pools queued on the shared device (a call more).
                let calls = counters.bind_calls;
                assert!(
                    (2 * ROUNDS as u64..=3 * ROUNDS as u64).contains(&calls),
                    "{calls}"
                );
                assert_eq!(counters.maps_queued, 0, "each map binds at once");
            } else {
                // Every map waited; the check's own submission bound it.
                assert_eq!(counters.maps_queued, ROUNDS as u64);
                assert!(counters.bind_calls <= 2 * ROUNDS as u64, "{counters:?}");
            }
        });
    }
}

/// A submission of queued maps that fails (made to fail here: no device fails on demand)
/// fails the wgpu submission that carried it, as an error of that operation, instead of
/// running work on pages that were not bound. wgpu takes a failed submission as the loss
/// of its device, and the context reports that.
#[test]
fn a_failed_submission_of_queued_maps_fails_the_work_that_carried_it() {
    common::within(
        std::time::Duration::from_secs(120),
        a_failed_submission_of_queued_maps,
    );
}

fn a_failed_submission_of_queued_maps() {
    let (own, sparse) = own_sparse_device();
    assert!(
        sparse.orders_on_gpu(),
        "maps are queued only where binds are ordered on the GPU"
    );
    let pool = Pool::from_context(&own, Config::default()).unwrap();
    let block = pool.alloc(256 << 10).unwrap();
    assert_eq!(pool.device_memory_usage().maps_queued, 1, "the map waits");
    assert_eq!(pool.device_memory_usage().bind_calls, 0);
    let at_submit = sparse.bind_calls_at_submit();
    sparse.fail_next_bind_submissions(1);
    let error = pool
        .write(&block, &pattern_bytes(9, 256 << 10))
        .unwrap_err();
    let message = error.to_string();
    assert!(message.to_lowercase().contains("memory"), "{message}");
    assert_eq!(
        sparse.bind_calls_at_submit(),
        at_submit,
        "the failed call bound nothing"
    );
    assert!(
        own.errors().device_lost().is_some(),
        "wgpu lost the device on the failed submission, and the context says so"
    );
    // From then on wgpu drops work without an error; the pool says the device is lost.
    let lost = pool.device_lost().expect("the pool sees the loss");
    match pool.write(&block, &pattern_bytes(10, 256 << 10)) {
        Err(wgpool::pool::ReadWriteError::DeviceLost(error)) => assert_eq!(error, lost),
        other => panic!("a write after the loss gave {other:?}"),
    }
    assert!(pool.alloc(256 << 10).is_err(), "no block of a lost device");
}

/// Binds queued for a shared call (`set_bind_batch`) reach the driver when the batch fills,
/// before an unmap's new signal of the GPU's work, and at the next wgpu submission; kernels
/// always find their pages bound, and unmaps join the queue. On a device of its own, so
/// that no other pool's binds join the queue.
#[test]
fn queued_maps_are_bound_before_any_work_that_may_use_them() {
    // Work that waits for a bind never submitted waits for ever (on lavapipe's one queue the
    // whole queue does, and so does dropping the memory after a failed assertion).
    common::within(std::time::Duration::from_secs(120), queued_maps_are_bound);
}

fn queued_maps_are_bound() {
    let (own, sparse) = own_sparse_device();
    let kernels = Kernels::new(own.device(), own.queue());
    let mut memory =
        PagedMemory::new(own.device(), own.queue(), USAGE, "batched", small_chunks()).unwrap();
    memory.set_bind_batch(4);
    memory.reserve_range(0, 16 << 20).unwrap();
    let buffer = memory.buffer(0).unwrap().clone();
    const RUN: u64 = 256 << 10;
    let fill_and_check = |offset: u64, seed: u32| {
        kernels
            .run(&KernelCall::fill_pattern(
                Operand::new(&buffer, offset, RUN),
                seed,
            ))
            .unwrap();
        let data = read_region(own.device(), own.queue(), &buffer, offset, RUN).unwrap();
        let expected: Vec<u32> = (0..(RUN / 4) as u32)
            .map(|i| pattern_word(seed, i))
            .collect();
        assert_eq!(words(&data), expected, "seed {seed}");
    };
    // Ten maps: the fourth and the eighth fill the batch, two stay queued.
    for i in 0..10u64 {
        memory.map(0, &[(i * 2 * RUN, RUN)]).unwrap();
    }
    assert_eq!(memory.counters().maps_queued, 10);
    assert_eq!(memory.counters().bind_calls, 2, "a call per full batch");
    let at_submit = sparse.bind_calls_at_submit();
    // Any wgpu submission binds the two queued maps first, in one call (checked before
    // anything waits for the GPU, which would wait for ever without that call).
    own.queue().submit(std::iter::empty());
    assert_eq!(
        sparse.bind_calls_at_submit(),
        at_submit + 1,
        "the submission bound the queued maps"
    );
    fill_and_check(9 * 2 * RUN, 90);
    for i in 0..9u64 {
        fill_and_check(i * 2 * RUN, i as u32);
    }
    assert_eq!(
        sparse.bind_calls_at_submit(),
        at_submit + 1,
        "nothing was left queued"
    );
    // A map queued, then an unmap with no work clock: the unmap needs a new signal of the
    // GPU's work, so the queued map goes first, in a call of its own, and the unmap waits
    // on the device; the next wgpu submission submits it.
    memory.map(0, &[(20 * RUN, RUN)]).unwrap();
    memory.unmap(0, &[(0, RUN)]).unwrap();
    assert_eq!(memory.counters().bind_calls, 3);
    assert_eq!(memory.counters().unmaps_queued, 1);
    assert_eq!(memory.counters().unbind_signals, 1);
    fill_and_check(20 * RUN, 20);
    assert_eq!(sparse.bind_calls_at_submit(), at_submit + 2);
    // A queued map of the pages unbound above, and an explicit submission of the queue.
    memory.map(0, &[(0, RUN)]).unwrap();
    memory.submit_queued_binds().unwrap();
    assert_eq!(memory.counters().bind_calls, 4);
    memory.submit_queued_binds().unwrap();
    assert_eq!(memory.counters().bind_calls, 4, "the queue was empty");
    fill_and_check(0, 7);
    assert_eq!(sparse.bind_calls_at_submit(), at_submit + 2);
    // With a work clock that shows no work submitted since the last unbind's signal, an
    // unbind needs no new signal: unmap, map the same pages again (a batch after the
    // unmap's, as it touches the same pages) and unmap elsewhere (joining that batch) all
    // wait on the device, and the next wgpu submission sends them in one call.
    memory.set_work_clock(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)));
    memory.unmap(0, &[(2 * RUN, RUN)]).unwrap();
    let calls = memory.counters().bind_calls;
    let signals = memory.counters().unbind_signals;
    memory.map(0, &[(2 * RUN, RUN)]).unwrap();
    memory.unmap(0, &[(4 * RUN, RUN)]).unwrap();
    assert_eq!(memory.counters().bind_calls, calls, "nothing sent yet");
    assert_eq!(
        memory.counters().unbind_signals,
        signals,
        "the last signal serves"
    );
    assert_eq!(memory.counters().unmaps_queued, 3);
    fill_and_check(2 * RUN, 33);
    assert_eq!(
        sparse.bind_calls_at_submit(),
        at_submit + 3,
        "one call for the three binds"
    );
    fill_and_check(0, 8);
    for i in [1u64, 3, 5, 6, 7, 8] {
        fill_and_check(i * 2 * RUN, 40 + i as u32);
    }
    assert_eq!(
        sparse.bind_calls_at_submit(),
        at_submit + 3,
        "nothing was left queued"
    );
}

/// A map that fills the batch and whose submission of the queue fails still succeeds: its
/// binds and the queued ones stay queued, and the next call that submits the queue (here the
/// next full batch) binds them all, so kernels find every page bound.
#[test]
fn a_full_batch_whose_submission_fails_stays_queued_for_the_next_call() {
    common::within(
        std::time::Duration::from_secs(120),
        a_full_batch_whose_submission_fails,
    );
}

fn a_full_batch_whose_submission_fails() {
    let (own, sparse) = own_sparse_device();
    let kernels = Kernels::new(own.device(), own.queue());
    let mut memory = PagedMemory::new(
        own.device(),
        own.queue(),
        USAGE,
        "full batch",
        small_chunks(),
    )
    .unwrap();
    memory.set_bind_batch(4);
    memory.reserve_range(0, 16 << 20).unwrap();
    let buffer = memory.buffer(0).unwrap().clone();
    const RUN: u64 = 256 << 10;
    for i in 0..3u64 {
        memory.map(0, &[(i * 2 * RUN, RUN)]).unwrap();
    }
    assert_eq!(memory.counters().bind_calls, 0, "three maps wait");
    sparse.fail_next_bind_submissions(1);
    memory
        .map(0, &[(3 * 2 * RUN, RUN)])
        .expect("a map whose batch fails to submit is still queued");
    assert_eq!(memory.counters().maps_queued, 4);
    assert_eq!(
        memory.counters().bind_calls,
        0,
        "the failed call bound nothing"
    );
    assert!(memory.is_mapped(0, 3 * 2 * RUN, RUN));
    // The next map finds five binds queued, at least a batch: one call binds them all.
    memory.map(0, &[(4 * 2 * RUN, RUN)]).unwrap();
    assert_eq!(memory.counters().bind_calls, 1, "one call for all five");
    let at_submit = sparse.bind_calls_at_submit();
    for i in 0..5u64 {
        let offset = i * 2 * RUN;
        kernels
            .run(&KernelCall::fill_pattern(
                Operand::new(&buffer, offset, RUN),
                i as u32,
            ))
            .unwrap();
        let data = read_region(own.device(), own.queue(), &buffer, offset, RUN).unwrap();
        let expected: Vec<u32> = (0..(RUN / 4) as u32)
            .map(|w| pattern_word(i as u32, w))
            .collect();
        assert_eq!(words(&data), expected, "run {i}");
    }
    assert_eq!(
        sparse.bind_calls_at_submit(),
        at_submit,
        "nothing was left queued for the submissions"
    );
}

/// Memory dropped while its queued binds cannot be submitted (the flush before the drop's
/// wgpu submission fails, and so does the drop's own) leaves none of them queued: they name
/// its buffers and chunks, freed by the drop, and must never reach the driver. Another
/// memory's queued binds stay, and bind at the next call.
#[test]
fn memory_dropped_while_its_binds_cannot_be_submitted_leaves_none_queued() {
    common::within(
        std::time::Duration::from_secs(120),
        memory_dropped_while_its_binds_cannot_be_submitted,
    );
}

fn memory_dropped_while_its_binds_cannot_be_submitted() {
    let (own, sparse) = own_sparse_device();
    const RUN: u64 = 256 << 10;
    let queued_memory = |label: &str, runs: u64| {
        let mut memory =
            PagedMemory::new(own.device(), own.queue(), USAGE, label, small_chunks()).unwrap();
        memory.set_bind_batch(16);
        memory.reserve_range(0, 8 << 20).unwrap();
        for i in 0..runs {
            memory.map(0, &[(i * 2 * RUN, RUN)]).unwrap();
        }
        memory
    };
    let mut kept = queued_memory("kept", 1);
    let kept_binds = sparse.queued_page_binds();
    assert!(kept_binds >= 1, "the kept memory's map waits");
    let dropped = queued_memory("dropped", 2);
    let queued = sparse.queued_page_binds();
    assert!(queued > kept_binds, "its two maps wait too");
    sparse.fail_next_bind_submissions(2);
    drop(dropped);
    assert_eq!(
        sparse.queued_page_binds(),
        kept_binds,
        "only the kept memory's binds stay queued"
    );
    // wgpu lost the device on its failed submission; the pool's own calls still reach the
    // driver, and the next one binds what stayed queued.
    let calls = kept.counters().bind_calls;
    kept.submit_queued_binds().unwrap();
    assert_eq!(kept.counters().bind_calls, calls + 1);
    assert_eq!(sparse.queued_page_binds(), 0);
    kept.wait_for_binds().unwrap();
    assert!(kept.is_mapped(0, 0, RUN));
}

/// Paged memory on `own`'s device whose maps and unmaps all wait in the device's queue (a
/// batch of 16, and a work clock that shows no work since the first unbind's signal, made
/// here), with range 0 of 8 MiB reserved.
fn queueing_memory(own: &wgpool::gpu::GpuContext, label: &str) -> PagedMemory {
    let mut memory =
        PagedMemory::new(own.device(), own.queue(), USAGE, label, small_chunks()).unwrap();
    memory.set_bind_batch(16);
    memory.set_work_clock(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)));
    memory.reserve_range(0, 8 << 20).unwrap();
    const RUN: u64 = 256 << 10;
    memory.map(0, &[(0, RUN)]).unwrap();
    memory.unmap(0, &[(0, RUN)]).unwrap();
    memory.submit_queued_binds().unwrap();
    memory
}

/// Memory dropped while its queued binds cannot be submitted, with a released range: the
/// range's buffer stays until the binds before its release are applied, but a queued map
/// into it names the dropped memory's chunk, so the map leaves the queue and only the
/// unbind after it stays.
#[test]
fn a_dropped_memorys_maps_into_its_released_ranges_leave_the_queue_too() {
    common::within(
        std::time::Duration::from_secs(120),
        a_dropped_memorys_maps_into_its_released_ranges,
    );
}

fn a_dropped_memorys_maps_into_its_released_ranges() {
    let (own, sparse) = own_sparse_device();
    let mut memory = queueing_memory(&own, "released");
    memory.reserve_range(1, 8 << 20).unwrap();
    const RUN: u64 = 256 << 10;
    assert_eq!(sparse.queued_page_binds(), 0);
    // One chunk's pages mapped into range 1 and unmapped, both queued; then the range goes.
    memory.map(1, &[(0, RUN)]).unwrap();
    memory.unmap(1, &[(0, RUN)]).unwrap();
    memory.release_range(1).unwrap();
    assert_eq!(sparse.queued_page_binds(), 2, "the map and the unbind wait");
    sparse.fail_next_bind_submissions(2);
    drop(memory);
    assert_eq!(
        sparse.queued_page_binds(),
        1,
        "the map of the freed chunk went; the unbind stays"
    );
}

/// `replay --gpu` whose binds still queued at the end of a run cannot be submitted stops
/// with the driver's error (the CLI exits 1) instead of reporting a run whose memory was
/// never bound; the device is still usable after it.
#[test]
fn a_replay_whose_last_binds_cannot_be_submitted_reports_the_drivers_error() {
    common::within(
        std::time::Duration::from_secs(120),
        a_replay_whose_last_binds_cannot_be_submitted,
    );
}

fn a_replay_whose_last_binds_cannot_be_submitted() {
    use wgpool::gpu::{GpuContext, HeadlessOptions};
    use wgpool::trace::{GpuReplayError, GpuReplayOptions, parse_trace, replay_on_gpu};
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let sparse = sparse_device(own.device()).unwrap();
    // Two maps: fewer than a batch, so they wait until the end of the run.
    let trace = parse_trace("alloc,1,4096,0\nalloc,2,3000000,0\nfree,1,4096,0\nfree,2,3000000,0\n")
        .unwrap();
    let options = GpuReplayOptions::default();
    sparse.fail_next_bind_submissions(1);
    match replay_on_gpu(&trace, &Config::default(), &own, &options) {
        Err(error @ GpuReplayError::QueuedBinds { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("binding the pages mapped at the end of the trace failed")
                    && message.to_lowercase().contains("memory"),
                "{message}"
            );
        }
        Err(other) => panic!("the replay failed otherwise: {other}"),
        Ok(report) => panic!("a replay whose binds failed reported {} ops", report.ops),
    }
    assert_eq!(sparse.queued_page_binds(), 0, "the dropped pool left none");
    let report = replay_on_gpu(&trace, &Config::default(), &own, &options).unwrap();
    assert_eq!(report.num_ooms, 0, "the next replay works");
    assert!(
        report.runs[0].bind_calls >= 1,
        "its maps were bound by the end of the run"
    );
}

/// Idle chunks are not freed while the queue of binds cannot be submitted: a queued map may
/// still name their memory (mapped, then unmapped, both waiting in the queue). Once the queue
/// goes to the driver, the next release frees them.
#[test]
fn idle_chunks_stay_while_queued_binds_that_name_them_cannot_be_submitted() {
    common::within(
        std::time::Duration::from_secs(120),
        idle_chunks_stay_while_queued_binds_cannot_be_submitted,
    );
}

fn idle_chunks_stay_while_queued_binds_cannot_be_submitted() {
    let (own, sparse) = own_sparse_device();
    let log = common::captured_log();
    let mut memory = queueing_memory(&own, "idle-kept");
    const RUN: u64 = 1 << 20;
    let signals = memory.counters().unbind_signals;
    memory.map(0, &[(2 * RUN, RUN)]).unwrap();
    memory.unmap(0, &[(2 * RUN, RUN)]).unwrap();
    assert_eq!(memory.counters().unbind_signals, signals, "no new signal");
    assert!(
        sparse.queued_page_binds() >= 2,
        "the map and its unmap wait"
    );
    let device_bytes = memory.usage().device_bytes;
    assert!(device_bytes > 0);
    sparse.fail_next_bind_submissions(1);
    assert_eq!(memory.release_idle(u64::MAX), 0, "nothing is freed");
    assert_eq!(memory.usage().device_bytes, device_bytes);
    let said = log.lines_of("idle-kept");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("idle device memory kept"), "{}", said[0]);
    assert!(sparse.queued_page_binds() >= 2, "the binds stay queued");
    let freed = memory.release_idle(u64::MAX);
    assert_eq!(sparse.queued_page_binds(), 0);
    assert!(
        freed > 0,
        "the idle chunks go once the queue went to the driver"
    );
    assert_eq!(memory.usage().device_bytes, device_bytes - freed);
}

/// Through a pool: with the default `page_bind_batch` maps wait for shared calls, with
/// `page_bind_batch:1` each binds at once; both take the same device memory and keep every
/// block's bytes.
#[test]
fn pools_batch_their_maps_and_keep_every_block_intact() {
    let ctx = gpu();
    let mut seen = Vec::new();
    for conf in [
        "expandable_segments:True",
        "expandable_segments:True,page_bind_batch:1",
    ] {
        let pool = Pool::with_options(
            ctx.device(),
            ctx.queue(),
            Config::parse(conf).unwrap(),
            PoolOptions::default().with_chunk_policy(small_chunks()),
        )
        .unwrap();
        assert_eq!(pool.memory_mode(), MemoryMode::Pages);
        // Sizes that grow a little each time, as a KV cache does: each needs new pages.
        let blocks: Vec<(Block, Vec<u8>)> = (0..24u32)
            .map(|i| {
                let size = (1 << 20) + u64::from(i) * 20_480;
                let block = pool.alloc(size).unwrap();
                let data = pattern_bytes(40 + i, size);
                (block, data)
            })
            .collect();
        let usage = pool.device_memory_usage();
        for (block, data) in &blocks {
            pool.write(block, data).unwrap();
        }
        for (i, (block, data)) in blocks.iter().enumerate() {
            assert!(pool.read(block).unwrap() == *data, "{conf}: block {i}");
        }
        seen.push((usage.maps_queued, usage.bind_calls, usage.device_bytes));
        drop(blocks);
        pool.check_consistency().unwrap();
    }
    let (batched, single) = (seen[0], seen[1]);
    assert_eq!(single.0, 0, "page_bind_batch:1 queues nothing");
    assert!(batched.0 >= 16, "{batched:?}: maps waited for shared calls");
    assert!(
        batched.1 * 4 <= single.1,
        "{batched:?} / {single:?}: far fewer calls"
    );
    assert_eq!(batched.2, single.2, "the same device memory");
}

/// The engine's page operations: unmapped memory stays spare, `release_spare` frees whole
/// idle chunks (never more than the engine released), stranded memory is mapped again
/// before any new chunk, and failures come back with the right kind.
#[test]
fn the_segment_source_holds_unmapped_memory_and_frees_what_the_engine_releases() {
    use wgpool::engine::{SegmentId, SegmentKind, SegmentSource};
    use wgpool::memory::PagedSource;
    let mut memory = PagedSource::new(paged());
    let mapping = memory.page_mapping().unwrap();
    let facts = memory.memory().sparse().facts();
    assert_eq!(mapping.page, facts.page_size);
    // Usual ranges leave room for many pools; the largest is the device's largest buffer.
    assert_eq!(mapping.range, memory.memory().range_size());
    assert!(
        mapping.range <= facts.address_space / 32,
        "{mapping:?} {facts:?}"
    );
    assert!(mapping.range >= 64 << 20, "{mapping:?}");
    assert_eq!(mapping.max_range, memory.memory().max_range());
    // The device's largest buffer within its address space (NVIDIA: 1 TiB of address space,
    // wgpu's 4 GiB buffers).
    let largest = facts.max_range_size.min(gpu().limits().max_buffer_size);
    assert!(
        mapping.max_range > largest / 2 && mapping.max_range <= facts.address_space,
        "{mapping:?} {facts:?}"
    );

    let id = SegmentId(1);
    SegmentSource::reserve_range(&mut memory, id, 4 << 20, SegmentKind::Large).unwrap();
    memory
        .map_pages(id, &[0..1 << 20, 2 << 20..3 << 20])
        .unwrap();
    assert_eq!(
        memory.memory().counters().bind_calls,
        1,
        "one bind per call"
    );
    assert_eq!(memory.memory().counters().chunks.allocations, 1);
    memory.unmap_pages(id, &[0..1 << 20]).unwrap();
    assert_eq!(
        memory.memory().usage().device_bytes,
        2 << 20,
        "unmapped memory stays spare"
    );
    // The chunk still backs mapped pages: nothing can be freed, and nothing more is.
    memory.release_spare(1 << 20);
    assert_eq!(memory.memory().usage().device_bytes, 2 << 20);
    // That stranded megabyte serves the next map: no new chunk.
    memory.map_pages(id, &[1 << 20..2 << 20]).unwrap();
    assert_eq!(memory.memory().counters().chunks.allocations, 1);
    memory.unmap_pages(id, &[1 << 20..3 << 20]).unwrap();
    memory.release_spare(2 << 20);
    assert_eq!(
        memory.memory().usage().device_bytes,
        0,
        "every chunk idle and released"
    );
    SegmentSource::release_range(&mut memory, id, 4 << 20);
    assert_eq!(memory.memory().usage().ranges, 0);

    // A fixed segment is a range of its own, wholly mapped, freed on release.
    memory
        .create_segment(SegmentId(2), 3 << 20, SegmentKind::Large)
        .unwrap();
    assert!(memory.memory().is_mapped(2, 0, 3 << 20));
    memory.release_segment(SegmentId(2), 3 << 20);
    assert_eq!(memory.memory().usage().device_bytes, 0);

    // Past the cap, and past the address space: out of memory, for the retry chain.
    memory.memory_mut().set_limit(Some(1 << 20));
    SegmentSource::reserve_range(&mut memory, id, 4 << 20, SegmentKind::Large).unwrap();
    let error = memory.map_pages(id, &[0..2 << 20]).unwrap_err();
    assert!(error.is_out_of_memory(), "{error}");
    assert!(
        !memory.memory().is_mapped(1, 0, 4096),
        "a failed map maps nothing"
    );
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
    let reason = pool.memory_mode_reason();
    assert!(
        reason.contains("expandable_segments:auto") && reason.contains(&why.reason),
        "{reason}"
    );
    // Pages required on such a device: a clear error that says how to get them.
    let refused = Pool::new(
        device,
        queue,
        Config::parse("expandable_segments:True").unwrap(),
    )
    .unwrap_err();
    assert!(
        matches!(
            refused,
            wgpool::pool::PoolError::PageMappingUnavailable { .. }
        ),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("sparse::request_device"),
        "{refused}"
    );
    let block = pool.alloc(3 << 20).unwrap();
    pool.write(&block, &[9u8; 4096]).unwrap();
    assert_eq!(pool.read(&block).unwrap()[..4096], [9u8; 4096]);
    let usage = pool.device_memory_usage();
    assert_eq!(usage.mode, MemoryMode::Segments);
    assert_eq!(usage.device_bytes, pool.memory_reserved());
    assert_eq!(usage.allocations, 1);
    let summary = pool.memory_summary();
    assert!(summary.contains("memory mode: segments"), "{summary}");
}

/// Address space is one per device and shared by its pools. Where a range of the usual size
/// no longer fits, a pool takes a range of just the request's size; where not even that
/// fits, the request is an out-of-memory error that names the address space, and it is
/// served once the space is given back.
#[test]
fn pools_take_ranges_of_the_requests_size_when_address_space_is_short() {
    use wgpool::engine::AllocError;
    use wgpool::gpu::{GpuContext, HeadlessOptions};
    // A device of its own: the test fills its address space.
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let ctx = &*own;
    let facts = ctx.page_mapping().unwrap().facts();
    let mut hog =
        PagedMemory::new(ctx.device(), ctx.queue(), USAGE, "hog", small_chunks()).unwrap();
    // Leave 4 MiB of address space, less than a usual range: as many ranges as that takes
    // (one on lavapipe, 128 of 4 GiB on NVIDIA).
    let left = 4 << 20;
    let mut taken = 0;
    let mut hogged = 0;
    while taken < facts.address_space - left {
        let size = (facts.address_space - left - taken).min(hog.max_range());
        hog.reserve_range(hogged, size).unwrap();
        taken += size;
        hogged += 1;
    }
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
    for id in 0..hogged {
        hog.release_range(id).unwrap();
    }
    let served = pool.alloc(left).unwrap();
    assert_ne!(served.buffer(), large.buffer(), "a new, usual range");
    assert_eq!(pool.read(&large).unwrap(), vec![2; 1 << 20]);
    drop((small, large, served));
    pool.check_consistency().unwrap();
}

/// Issue 24, item 6: pools that each hold a range until the device's address space is gone.
/// The next pool's first allocation fails with a message that says address space, not
/// memory, ran out and names what helps (not a larger cap, nor `overflow:host`); each of the
/// remedies it names then works.
#[test]
fn exhausted_address_space_says_what_helps() {
    use wgpool::engine::AllocError;
    use wgpool::gpu::{GpuContext, HeadlessOptions};
    // A device of its own: the test fills its address space.
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let ctx = &*own;
    let address_space = ctx.page_mapping().unwrap().facts().address_space;
    let mut pools = Vec::new();
    // Blocks of 1 MiB take ranges of large blocks (the usual range: 64 MiB on lavapipe, 4 GiB
    // on NVIDIA), so that address space runs out long before memory does: each pool maps
    // at least a chunk (40 MiB on an 80 GB device). With 1 KiB blocks an H100's memory ran
    // out first (call 44): once usual ranges had filled the address space, later pools took
    // ranges of just their 64 KiB segment, 2,069 pools in all.
    let error = loop {
        let pool = Pool::from_context(ctx, Config::default()).unwrap();
        match pool.alloc(1 << 20) {
            Ok(block) => pools.push((pool, block)),
            Err(error) => break error,
        }
        assert!(pools.len() < 4096, "the address space never ran out");
    };
    let reserved: u64 = pools.iter().map(|(_, block)| block.buffer().size()).sum();
    assert!(
        reserved > address_space / 2,
        "{} pools reserved {reserved} of {address_space}",
        pools.len()
    );
    assert!(matches!(error, AllocError::OutOfMemory(_)), "{error}");
    let message = error.to_string();
    for needle in [
        "sparse address space is exhausted",
        "Address space is what ran out, not memory",
        "expandable_segments:False",
        "drop pools in pages mode",
    ] {
        assert!(message.contains(needle), "lacks `{needle}`: {message}");
    }
    assert!(!message.contains("raise the cap"), "{message}");
    // Fixed segments take no address space.
    let fixed =
        Pool::from_context(ctx, Config::parse("expandable_segments:False").unwrap()).unwrap();
    assert_eq!(fixed.memory_mode(), MemoryMode::Segments);
    fixed
        .write(&fixed.alloc(1024).unwrap(), &[7; 1024])
        .unwrap();
    // A dropped pool gives its range back to the next one.
    pools.pop();
    let next = Pool::from_context(ctx, Config::default()).unwrap();
    let block = next.alloc(1024).expect("the dropped pool's address space");
    assert_eq!(next.memory_mode(), MemoryMode::Pages);
    drop(block);
}

/// A driver that refuses a sparse range while the pools' own count of address space has room
/// (NVIDIA's does past about 884 GiB of its 1 TiB, call 41): the allocation fails as
/// out-of-memory whose cause is address space, with the driver's words and what helps, goes
/// down the retry chain (idle ranges released, then one more try), and the pool stays usable.
/// The refusal is made on purpose here; no device refuses a small range on demand.
#[test]
fn a_range_the_driver_refuses_is_out_of_address_space_end_to_end() {
    use wgpool::engine::AllocError;
    use wgpool::gpu::{GpuContext, HeadlessOptions};
    // A device of its own: the refusals apply to every range made on the device.
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let sparse = sparse_device(own.device()).unwrap();
    let pool = Pool::from_context(&own, Config::default()).unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    // Every try of the retry chain is refused.
    sparse.fail_next_range_creations(u64::MAX);
    let error = pool.alloc(1 << 20).unwrap_err();
    sparse.fail_next_range_creations(0);
    let AllocError::OutOfMemory(oom) = &error else {
        panic!("a refused range is out-of-memory for the retry chain: {error}")
    };
    let message = error.to_string();
    for needle in [
        "driver refused a sparse range",
        "A device memory allocation has failed",
        "Address space is what ran out, not memory",
        "expandable_segments:False",
    ] {
        assert!(message.contains(needle), "lacks `{needle}`: {message}");
    }
    assert!(!message.contains("vkAllocateMemory"), "{message}");
    assert_eq!(oom.rounded, 1 << 20);
    let stats = pool.memory_stats();
    assert_eq!(
        (stats.num_ooms, stats.num_alloc_retries),
        (1, 1),
        "{stats:?}"
    );
    assert_eq!(stats.reserved_bytes.all.current, 0, "nothing was reserved");
    // One refusal: the policy's next try (before the chain releases anything) gets the range.
    sparse.fail_next_range_creations(1);
    let block = pool.alloc(1 << 20).expect("the next try after one refusal");
    pool.write(&block, &pattern_bytes(4, 1 << 20)).unwrap();
    assert_eq!(pool.read(&block).unwrap(), pattern_bytes(4, 1 << 20));
    let stats = pool.memory_stats();
    assert_eq!(
        (stats.num_ooms, stats.num_alloc_retries),
        (1, 1),
        "{stats:?}"
    );
}

/// Releasing a range never waits for the binds into it: its buffer (and address space) is
/// kept until they are applied. A reservation of another pool that needs that address space
/// right away gets it (waiting for the binds), so filling the whole address space, mapping
/// and unmapping a page in every range, releasing and filling it again from another pool
/// works round after round.
#[test]
fn address_space_of_released_ranges_goes_to_the_next_reservation_of_any_pool() {
    use wgpool::gpu::{GpuContext, HeadlessOptions};
    // A device of its own: the test fills its address space.
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let ctx = &*own;
    let facts = ctx.page_mapping().unwrap().facts();
    let page = facts.page_size;
    let mut pools: Vec<PagedMemory> = (0..2)
        .map(|_| PagedMemory::new(ctx.device(), ctx.queue(), USAGE, "fill", small_chunks()))
        .collect::<Result<_, _>>()
        .unwrap();
    let largest = pools[0].max_range();
    // Ranges that fill the address space exactly.
    let mut sizes = Vec::new();
    let mut left = facts.address_space / page * page;
    while left > 0 {
        let size = left.min(largest);
        sizes.push(size);
        left -= size;
    }
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    for round in 0..4 {
        let pool = &mut pools[round % 2];
        for (id, &size) in sizes.iter().enumerate() {
            let id = id as u32;
            pool.reserve_range(id, size)
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            pool.map(id, &[(size - page, page)]).unwrap();
            let buffer = pool.buffer(id).unwrap().clone();
            let operand = Operand::new(&buffer, size - page, page);
            kernels
                .run(&KernelCall::fill(operand, round as u32))
                .unwrap();
            let bytes = read_region(ctx.device(), ctx.queue(), &buffer, size - page, page).unwrap();
            assert!(words(&bytes).iter().all(|&w| w == round as u32));
        }
        // One more page of address space does not fit.
        assert!(pool.reserve_range(sizes.len() as u32, page).is_err());
        for id in 0..sizes.len() as u32 {
            pool.unmap(id, &[(sizes[id as usize] - page, page)])
                .unwrap();
            pool.release_range(id).unwrap();
        }
        assert_eq!(pool.usage().ranges, 0);
        assert_eq!(
            pool.counters().ranges_released,
            pool.counters().ranges_created
        );
    }
}

/// On a device with sparse binding (the test device), a pool of the default configuration
/// maps pages and says so in `memory_mode_reason`, its device memory and the summary;
/// `expandable_segments:False` keeps fixed segments and says that.
#[test]
fn pools_on_a_device_with_sparse_binding_map_pages_by_default() {
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

/// The memory mode is decided once, for the engine and the memory alike: a pool that does
/// not cache (`backend:passthrough`) keeps fixed segments on a device that maps pages under
/// `expandable_segments:auto`, and says why.
#[test]
fn a_pool_that_does_not_cache_keeps_fixed_segments_on_a_page_mapping_device() {
    let conf = "expandable_segments:auto,backend:passthrough";
    let pool = Pool::from_context(gpu(), Config::parse(conf).unwrap()).unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Segments);
    assert_eq!(pool.device_memory_usage().mode, MemoryMode::Segments);
    assert_eq!(pool.page_mapping(), None);
    assert_eq!(
        pool.memory_mode_reason(),
        "the engine keeps fixed segments under backend:passthrough"
    );
    let block = pool.alloc(1 << 20).unwrap();
    pool.write(&block, &[3u8; 4096]).unwrap();
    assert_eq!(pool.read(&block).unwrap()[..4096], [3u8; 4096]);
    pool.check_consistency().unwrap();
}

/// A pool on the shared device that maps pages.
fn pages_pool() -> Pool {
    let pool = Pool::from_context(gpu(), Config::parse("expandable_segments:True").unwrap())
        .expect("the test device maps pages");
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    pool
}

/// Blocks of odd sizes laid side by side in an address range straddle the device's 4 KiB
/// pages (and the pool's 64 KiB and 512 KiB pages); kernels and host writes on each keep to
/// its bytes, and a copy between two straddling blocks is exact.
#[test]
fn blocks_straddling_page_borders_keep_their_bytes() {
    let ctx = gpu();
    let pool = pages_pool();
    let device_page = ctx.page_mapping().unwrap().page_size();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    let sizes: [u64; 12] = [
        3000,
        5000,
        4608,
        12_000,
        700,
        9000,
        20_000,
        1500,
        70_000,
        6000,
        (1 << 20) + 3000,
        (2 << 20) + 100,
    ];
    // Sizes for 4 KiB pages (lavapipe), scaled to the device's page (NVIDIA: 64 KiB).
    let scale = (device_page / 4096).max(1);
    let blocks: Vec<Block> = sizes
        .iter()
        .map(|&s| pool.alloc(s * scale).unwrap())
        .collect();
    let straddles = |b: &Block, page: u64| b.offset() / page != (b.offset() + b.size() - 1) / page;
    let across = blocks.iter().filter(|b| straddles(b, device_page)).count();
    assert!(across >= 6, "{across} blocks cross a {device_page} B page");
    assert!(blocks.iter().any(|b| straddles(b, 64 << 10)));
    assert!(blocks.iter().any(|b| b.offset() % device_page != 0));
    // Even blocks are written by a kernel, odd ones from the host.
    let mut expected = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let seed = 100 + i as u32;
        if i % 2 == 0 {
            kernels
                .run(&KernelCall::fill_pattern(block.operand(), seed))
                .unwrap();
            expected.push(pattern_bytes(seed, block.size()));
        } else {
            let data: Vec<u8> = (0..block.size())
                .map(|j| (j as u32).wrapping_mul(seed) as u8)
                .collect();
            pool.write(block, &data).unwrap();
            expected.push(data);
        }
    }
    for (i, (block, want)) in blocks.iter().zip(&expected).enumerate() {
        assert!(
            pool.read(block).unwrap() == *want,
            "block {i} of {} B at {} changed",
            block.size(),
            block.offset()
        );
    }
    // A copy from one straddling block into another at a different page offset.
    let (from, to) = (&blocks[2], &blocks[6]);
    assert!(straddles(from, device_page) && straddles(to, device_page));
    let len = from.bound_size();
    kernels
        .run(&KernelCall::copy(
            Dtype::F32,
            from.operand(),
            Operand::new(to.buffer(), to.offset(), len),
        ))
        .unwrap();
    let got = pool.read(to).unwrap();
    assert!(got[..len as usize] == expected[2][..], "the copy");
    assert!(
        got[len as usize..] == expected[6][len as usize..],
        "past the copy"
    );
    for (i, (block, want)) in blocks.iter().zip(&expected).enumerate() {
        if i != 6 {
            assert!(
                pool.read(block).unwrap() == *want,
                "block {i} after the copy"
            );
        }
    }
    pool.mark_submitted();
    drop(blocks);
    pool.check_consistency().unwrap();
}

/// Pages are mapped (growth) and unmapped with their memory freed (`empty_cache`) while
/// kernels submitted before may still run: a block read by those kernels is dropped and
/// its pages unmapped at once, and the kernels still read its bytes; live blocks keep
/// theirs, and blocks placed on the memory afterwards get their own.
#[test]
fn growth_and_shrinking_while_kernels_run_keep_live_blocks_intact() {
    let ctx = gpu();
    // Chunks free only whole: a chunk per block, so that freeing one block frees memory.
    let one_chunk_per_block = ChunkPolicy::default()
        .with_min_chunk(1 << 20)
        .with_max_chunk(1 << 20)
        .with_device_divisor(0)
        .with_granule(1 << 20)
        .with_spare_on_large(false);
    let pool = Pool::with_options(
        ctx.device(),
        ctx.queue(),
        Config::parse("expandable_segments:True").unwrap(),
        PoolOptions::default().with_chunk_policy(one_chunk_per_block),
    )
    .unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    const LEN: u64 = 4 << 20;
    let live = pool.alloc(LEN).unwrap();
    let live_bytes = pattern_bytes(1, LEN);
    pool.write(&live, &live_bytes).unwrap();
    let source = pool.alloc(LEN).unwrap();
    let out = pool.alloc(LEN).unwrap();
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    kernels
        .record(&mut encoder, &KernelCall::fill_pattern(source.operand(), 2))
        .unwrap();
    for _ in 0..6 {
        kernels
            .record(
                &mut encoder,
                &KernelCall::copy(Dtype::F32, source.operand(), out.operand()),
            )
            .unwrap();
    }
    pool.submit([encoder.finish()]);
    // Shrink while the copies may run: the source's pages are unmapped and freed.
    let before = pool.device_memory_usage();
    drop(source);
    pool.empty_cache();
    let after = pool.device_memory_usage();
    assert!(
        after.device_bytes + LEN <= before.device_bytes,
        "the source's memory went back: {} -> {}",
        before.device_bytes,
        after.device_bytes
    );
    // Unbinds bind in calls of the pool's own or wait for a shared call (`page_bind_batch`),
    // which another test's submission on the shared device may send.
    assert!(
        after.bind_calls + after.unmaps_queued > before.bind_calls + before.unmaps_queued,
        "pages were unmapped"
    );
    // Grow while they may still run: new pages, written at once.
    let grown: Vec<(Block, Vec<u8>)> = (0..4u32)
        .map(|i| {
            let size = LEN + u64::from(i) * 12_288 + 512;
            let block = pool.alloc(size).unwrap();
            let data = pattern_bytes(10 + i, size);
            pool.write(&block, &data).unwrap();
            (block, data)
        })
        .collect();
    // Maps bind in calls of the pool's own, or wait for a call shared with other maps.
    let grown_usage = pool.device_memory_usage();
    assert!(
        grown_usage.bind_calls + grown_usage.maps_queued > after.bind_calls + after.maps_queued,
        "pages were mapped"
    );
    // Shrink again: two of the new blocks go.
    let mut grown = grown;
    grown.truncate(2);
    pool.empty_cache();
    assert!(
        pool.read(&out).unwrap() == pattern_bytes(2, LEN),
        "the copies read the source"
    );
    assert!(
        pool.read(&live).unwrap() == live_bytes,
        "the live block kept its bytes"
    );
    for (i, (block, data)) in grown.iter().enumerate() {
        assert!(pool.read(block).unwrap() == *data, "grown block {i}");
    }
    pool.mark_submitted();
    drop((live, out, grown));
    pool.empty_cache();
    assert_eq!(pool.device_memory_usage().device_bytes, 0);
    pool.check_consistency().unwrap();
}

/// A block larger than the storage binding limit, in an address range: kernels process it
/// in windows, and an application's own bind group reaches its end through
/// `binding_range`; every word lands where it belongs.
#[test]
fn a_block_over_the_binding_limit_works_through_windows_in_pages_mode() {
    let ctx = gpu();
    let device = ctx.device();
    let pool = pages_pool();
    let limit = ctx.limits().max_storage_buffer_binding_size;
    let tail = 64u64 << 10;
    let alignment = u64::from(ctx.limits().min_storage_buffer_offset_alignment);
    let big = pool.alloc(limit + alignment + tail).unwrap();
    assert!(matches!(big.binding(), Err(BindingError::TooLarge { .. })));
    let read = |at: u64, len: u64| {
        words(&read_region(device, ctx.queue(), big.buffer(), big.offset() + at, len).unwrap())
    };
    let pattern = |from: u64, len: u64| -> Vec<u32> {
        (from / 4..(from + len) / 4)
            .map(|i| pattern_word(5, i as u32))
            .collect()
    };
    // Kernels split the block into windows of at most the limit; every window continues the
    // global word index.
    let kernels = Kernels::new(device, ctx.queue());
    kernels
        .run(&KernelCall::fill_pattern(big.operand(), 5))
        .unwrap();
    // Word offsets: the limit need not be a multiple of 8 (NVIDIA's is 2^31 - 4).
    for at in [0, limit / 8 * 4, limit - tail, limit] {
        assert_eq!(read(at, tail), pattern(at, tail), "64 KiB at {at}");
    }
    // 64 KiB past the first window, through a window of the application's own, at the
    // first offset from the limit on that the device's binding alignment allows (the limit
    // itself on lavapipe; NVIDIA's, 2^31 - 4, is not a multiple of 32).
    let at = limit.div_ceil(alignment) * alignment;
    assert!(at + tail <= big.size());
    let pipeline = common::fill_ones_pipeline(device);
    let layout = pipeline.get_bind_group_layout(0);
    let group = BlockBindings::new()
        .window(0, BindingAccess::ReadWrite, &big, at, tail)
        .create_bind_group(device, &layout)
        .unwrap();
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups((tail / 4 / 64) as u32, 1, 1);
    }
    pool.submit([encoder.finish()]);
    assert_eq!(
        read(at - tail, tail),
        pattern(at - tail, tail),
        "before the window"
    );
    assert!(read(at, tail).iter().all(|&w| w == u32::MAX), "the window");
    assert_eq!(read(0, tail), pattern(0, tail), "the head");
}
