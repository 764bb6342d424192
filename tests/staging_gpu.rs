//! The host staging pool on a real adapter (lavapipe in CI): byte-exact round trips of many
//! sizes at non-zero block offsets, reuse of cached staging buffers, safety of transfers in
//! flight against later transfers of the same size class, staging and readback buffers,
//! many threads, and bad input.
//!
//! These tests need an adapter and fail, saying how to install one, when there is none.

mod common;

use wgpool::bench::timing::RunCounts;
use wgpool::bench::transfers::{TransferBenchConfig, measure_transfers};
use wgpool::config::Config;
use wgpool::gpu::GpuContext;
use wgpool::gpu::transfer::{read_region, write_region};
use wgpool::pool::{Block, Pool, PoolOptions};
use wgpool::staging::{StagingError, StagingOptions, StagingPool};

fn pool(gpu: &GpuContext) -> Pool {
    Pool::from_context(gpu, Config::parse("policy:pytorch").unwrap()).unwrap()
}

/// Small chunks and two in flight, so that a few MiB span many chunks; two copy threads
/// with a small per-thread minimum, so that the parallel copy paths run too.
fn small_options() -> StagingOptions {
    StagingOptions::default()
        .with_chunk_size(64 << 10)
        .with_max_in_flight(2)
        .with_threads(2)
        .with_min_bytes_per_thread(4096)
}

fn staging(pool: &Pool) -> StagingPool {
    StagingPool::from_pool(pool, small_options()).unwrap()
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            (x >> 13) as u8 ^ seed as u8
        })
        .collect()
}

const GUARD: u8 = 0x5A;

/// Fills the block's whole segment buffer with the guard byte.
fn guard_segment(gpu: &GpuContext, block: &Block) {
    let buffer = block.buffer();
    write_region(
        gpu.device(),
        gpu.queue(),
        buffer,
        0,
        &vec![GUARD; buffer.size() as usize],
    )
    .unwrap();
}

/// Checks that the segment holds `expected` at the block and the guard everywhere outside
/// `offset..offset + bound_size()` (the pad word may hold zeros).
fn check_segment(gpu: &GpuContext, block: &Block, expected: &[u8], context: &str) {
    let buffer = block.buffer();
    let all = read_region(gpu.device(), gpu.queue(), buffer, 0, buffer.size()).unwrap();
    let start = block.offset() as usize;
    let end = start + expected.len();
    assert!(
        all[start..end] == *expected,
        "{context}: the block's bytes differ from the data"
    );
    let bound = start + block.bound_size() as usize;
    assert!(
        all[end..bound].iter().all(|&b| b == 0 || b == GUARD),
        "{context}: pad bytes"
    );
    let outside = all[..start].iter().chain(&all[bound..]);
    assert!(
        outside.clone().all(|&b| b == GUARD),
        "{context}: {} bytes outside the block changed",
        outside.filter(|&&b| b != GUARD).count()
    );
}

#[test]
fn round_trips_of_many_sizes_are_byte_exact_at_non_zero_offsets() {
    let gpu = common::gpu();
    let pool = pool(gpu);
    let staging = staging(&pool);
    let sizes: [usize; 22] = [
        1,
        2,
        3,
        4,
        5,
        7,
        8,
        511,
        512,
        513,
        4095,
        4096,
        65_535,
        65_536,
        65_537,
        3 * 65_536 + 3,
        1 << 20,
        (1 << 20) + 5,
        (2 << 20) - 4,
        (2 << 20) + 1,
        (3 << 20) + 7,
        (5 << 20) + 2,
    ];
    for (seed, &size) in sizes.iter().enumerate() {
        let seed = seed as u32 + 1;
        // The last round's blocks were exposed (their buffers compared) and are dropped now,
        // with all their work submitted: free them and start from an empty pool, so this
        // round's layout is predictable.
        pool.mark_submitted();
        pool.empty_cache();
        // A block before the target puts it at a non-zero offset of the same segment.
        let before = pool
            .alloc(if size > (1 << 20) { 2 << 20 } else { 4096 })
            .unwrap();
        let block = pool.alloc(size as u64).unwrap();
        let _after = pool.alloc(4096).unwrap();
        assert!(block.offset() > 0, "size {size}: block at offset 0");
        assert_eq!(before.buffer(), block.buffer(), "size {size}: same segment");
        guard_segment(gpu, &block);

        let data = pattern(seed, size);
        staging.upload(&block, &data).unwrap();
        check_segment(gpu, &block, &data, &format!("upload of {size} bytes"));

        assert_eq!(
            staging.download(&block).unwrap(),
            data,
            "download of {size}"
        );
        let ticket = staging.download_async(&block).unwrap();
        assert_eq!(ticket.len(), size as u64);
        assert_eq!(ticket.wait().unwrap(), data, "download_async of {size}");
        let prefix = size / 2;
        let mut out = vec![0u8; prefix];
        staging.download_into(&block, &mut out).unwrap();
        assert_eq!(out, data[..prefix], "download_into a prefix of {size}");

        // A partial upload of a multiple of 4 leaves the rest of the block as it was.
        if size >= 8 {
            let head = (size / 2) / 4 * 4;
            let new = pattern(seed + 100, head);
            staging.upload_async(&block, &new).unwrap().wait().unwrap();
            let mut expected = data.clone();
            expected[..head].copy_from_slice(&new);
            check_segment(gpu, &block, &expected, &format!("partial upload of {size}"));
        }

        // Through a staging buffer filled in place, and a readback buffer read in place.
        let data = pattern(seed + 200, size);
        let mut buffer = staging.alloc_staging_buffer(size as u64).unwrap();
        buffer.write_at(0, &data).unwrap();
        staging.upload_from(&mut buffer, &block).unwrap();
        buffer.wait().unwrap();
        check_segment(gpu, &block, &data, &format!("staging buffer of {size}"));
        let mut readback = staging.alloc_readback_buffer(size as u64).unwrap();
        staging.download_to_readback(&block, &mut readback).unwrap();
        assert!(*readback.view().unwrap() == *data, "readback of {size}");
        let mut copy = vec![0u8; size];
        readback.read_into(&mut copy).unwrap();
        assert_eq!(copy, data);
    }
    pool.check_consistency().unwrap();
}

#[test]
fn staging_buffers_are_reused_not_recreated() {
    let gpu = common::gpu();
    let pool = pool(gpu);
    let staging = staging(&pool);
    let block = pool.alloc(40_000).unwrap();
    let rounds = 30;
    for round in 0..rounds {
        let data = pattern(round, 40_000);
        staging.upload(&block, &data).unwrap();
        assert_eq!(staging.download(&block).unwrap(), data);
    }
    let stats = staging.stats();
    // One 64 KiB class each way: the first transfer creates it, every later one reuses it.
    assert_eq!(stats.upload.buffers_created, 1, "{stats:?}");
    assert_eq!(stats.download.buffers_created, 1, "{stats:?}");
    assert_eq!(stats.upload.reuse_count, rounds as u64 - 1, "{stats:?}");
    assert_eq!(stats.download.reuse_count, rounds as u64 - 1, "{stats:?}");
    assert_eq!(stats.uploads, rounds as u64);
    assert_eq!(stats.bytes_uploaded, 40_000 * rounds as u64);
    assert_eq!(stats.bytes_downloaded, 40_000 * rounds as u64);

    // A transfer of many chunks keeps at most max_in_flight chunk buffers per direction.
    let big = pool.alloc(1 << 20).unwrap();
    for round in 0..5 {
        let data = pattern(round + 50, 1 << 20);
        staging.upload(&big, &data).unwrap();
        assert_eq!(staging.download(&big).unwrap(), data);
    }
    let stats = staging.stats();
    let in_flight = small_options().max_in_flight as u64;
    assert!(stats.upload.buffers_created <= 1 + in_flight, "{stats:?}");
    assert!(stats.download.buffers_created <= 1 + in_flight, "{stats:?}");
    // 5 rounds of 16 chunks each way, nearly all served from the cache.
    assert!(stats.upload.reuse_count >= rounds as u64 - 1 + 5 * 16 - in_flight);
    assert!(stats.download.reuse_count >= rounds as u64 - 1 + 5 * 16 - in_flight);
    // Idle: everything allocated is cached; emptying the cache destroys it all.
    assert_eq!(stats.total.allocated_bytes, stats.total.cached_bytes);
    assert!(stats.total.peak_allocated_bytes >= stats.total.allocated_bytes);
    staging.empty_cache();
    let stats = staging.stats();
    assert_eq!(stats.total.allocated_bytes, 0);
    assert_eq!(stats.total.cached_bytes, 0);
    assert_eq!(stats.total.buffers, 0);
    assert_eq!(stats.total.buffers_created, stats.total.buffers_destroyed);

    // User staging buffers come from and return to the same cache.
    let first = staging.alloc_staging_buffer(100_000).unwrap();
    assert_eq!(first.capacity(), 128 << 10);
    drop(first);
    let created = staging.stats().upload.buffers_created;
    let reused = staging.stats().upload.reuse_count;
    let again = staging.alloc_staging_buffer(70_000).unwrap();
    assert_eq!(staging.stats().upload.buffers_created, created);
    assert_eq!(staging.stats().upload.reuse_count, reused + 1);
    drop(again);
    let readback = staging.alloc_readback_buffer(100_000).unwrap();
    drop(readback);
    let created = staging.stats().download.buffers_created;
    drop(staging.alloc_readback_buffer(90_000).unwrap());
    assert_eq!(staging.stats().download.buffers_created, created);
}

#[test]
fn the_cache_keeps_at_most_max_cached_bytes() {
    let gpu = common::gpu();
    let pool = pool(gpu);
    let staging =
        StagingPool::from_pool(&pool, small_options().with_max_cached_bytes(64 << 10)).unwrap();
    // Two user buffers of the 64 KiB class held at once, then both returned: one fits.
    let first = staging.alloc_staging_buffer(1000).unwrap();
    let second = staging.alloc_staging_buffer(1000).unwrap();
    assert_eq!(staging.stats().upload.buffers_created, 2);
    drop(first);
    drop(second);
    let stats = staging.stats();
    assert_eq!(stats.upload.cached_bytes, 64 << 10, "{stats:?}");
    assert_eq!(stats.upload.buffers_destroyed, 1, "{stats:?}");
    assert_eq!(stats.upload.buffers, 1, "{stats:?}");
    // A download buffer does not fit beside it either.
    let block = pool.alloc(1000).unwrap();
    staging.upload(&block, &[1u8; 1000]).unwrap();
    assert_eq!(staging.download(&block).unwrap(), vec![1u8; 1000]);
    let stats = staging.stats();
    assert_eq!(stats.total.cached_bytes, 64 << 10, "{stats:?}");
    assert_eq!(stats.download.buffers, 0, "{stats:?}");
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<StagingPool>();
    send_sync::<wgpool::staging::StagingBuffer>();
    send_sync::<wgpool::staging::ReadbackBuffer>();
    send_sync::<wgpool::staging::UploadTicket>();
    send_sync::<wgpool::staging::DownloadTicket>();
}

/// Keeps the GPU busy for a while, so that the transfers submitted next are still in flight
/// when the test submits more.
fn occupy_gpu(gpu: &GpuContext, scratch: &[wgpu::Buffer; 2]) {
    let mut encoder = gpu.device().create_command_encoder(&Default::default());
    for _ in 0..4 {
        encoder.copy_buffer_to_buffer(&scratch[0], 0, &scratch[1], 0, scratch[0].size());
        encoder.copy_buffer_to_buffer(&scratch[1], 0, &scratch[0], 0, scratch[0].size());
    }
    gpu.queue().submit([encoder.finish()]);
}

fn scratch(gpu: &GpuContext) -> [wgpu::Buffer; 2] {
    let make = || {
        gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging test scratch"),
            size: 64 << 20,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    };
    [make(), make()]
}

#[test]
fn an_upload_in_flight_is_not_corrupted_by_a_later_upload_of_the_same_class() {
    let gpu = common::gpu();
    let pool = pool(gpu);
    let staging = staging(&pool);
    let scratch = scratch(gpu);
    let mut overlapped = 0;
    for round in 0..8u32 {
        let x = pool.alloc(30_000).unwrap();
        let y = pool.alloc(30_000).unwrap();
        let a = pattern(round * 2 + 1, 30_000);
        let b = pattern(round * 2 + 2, 30_000);
        occupy_gpu(gpu, &scratch);
        let ticket_a = staging.upload_async(&x, &a).unwrap();
        let ticket_b = staging.upload_async(&y, &b).unwrap();
        let stats = staging.stats();
        if !ticket_a.is_done() {
            // A was still in flight when the stats were read, and so was B (it runs after A):
            // two distinct 64 KiB buffers were held by flights, none of them cached.
            overlapped += 1;
            let in_flight = stats.upload.allocated_bytes - stats.upload.cached_bytes;
            assert!(in_flight >= 2 * (64 << 10), "round {round}: {stats:?}");
        }
        ticket_b.wait().unwrap();
        ticket_a.wait().unwrap();
        assert_eq!(staging.download(&x).unwrap(), a, "round {round}: block X");
        assert_eq!(staging.download(&y).unwrap(), b, "round {round}: block Y");
    }
    // Multi-chunk uploads in flight back to back, with one chunk buffer per transfer.
    let one = StagingPool::from_pool(&pool, small_options().with_max_in_flight(1)).unwrap();
    let x = pool.alloc(700_000).unwrap();
    let y = pool.alloc(700_000).unwrap();
    let a = pattern(91, 700_000);
    let b = pattern(92, 700_000);
    occupy_gpu(gpu, &scratch);
    let ticket_a = one.upload_async(&x, &a).unwrap();
    let ticket_b = one.upload_async(&y, &b).unwrap();
    drop(ticket_a); // dropping a ticket leaves the upload to finish on its own
    ticket_b.wait().unwrap();
    assert_eq!(one.download(&x).unwrap(), a);
    assert_eq!(one.download(&y).unwrap(), b);
    eprintln!("uploads overlapped in {overlapped} of 8 rounds");
}

#[test]
fn a_download_in_flight_is_not_corrupted_by_later_transfers() {
    let gpu = common::gpu();
    let pool = pool(gpu);
    let staging = staging(&pool);
    let scratch = scratch(gpu);
    for round in 0..6u32 {
        let size = [30_000usize, 200_003][round as usize % 2];
        let x = pool.alloc(size as u64).unwrap();
        let y = pool.alloc(size as u64).unwrap();
        let a = pattern(round * 3 + 1, size);
        let b = pattern(round * 3 + 2, size);
        staging.upload(&x, &a).unwrap();
        staging.upload(&y, &b).unwrap();
        occupy_gpu(gpu, &scratch);
        let ticket_x = staging.download_async(&x).unwrap();
        let ticket_y = staging.download_async(&y).unwrap();
        // X changes after its download was submitted: the ticket holds X as it was.
        let c = pattern(round * 3 + 3, size);
        staging.upload(&x, &c).unwrap();
        let mut from_y = vec![0u8; size];
        ticket_y.wait_into(&mut from_y).unwrap();
        assert_eq!(ticket_x.wait().unwrap(), a, "round {round}: X as it was");
        assert_eq!(from_y, b, "round {round}: Y");
        assert_eq!(staging.download(&x).unwrap(), c, "round {round}: X now");
    }
    // A ticket dropped unread gives its buffers back once the GPU is done.
    let x = pool.alloc(200_000).unwrap();
    drop(staging.download_async(&x).unwrap());
    let data = pattern(77, 200_000);
    staging.upload(&x, &data).unwrap();
    assert_eq!(staging.download(&x).unwrap(), data);
    let stats = staging.stats();
    assert_eq!(
        stats.total.allocated_bytes, stats.total.cached_bytes,
        "{stats:?}"
    );
}

#[test]
fn staging_and_readback_buffers_wait_for_the_gpu_before_reuse() {
    let gpu = common::gpu();
    let pool = pool(gpu);
    let staging = staging(&pool);
    let scratch = scratch(gpu);
    let size = 50_000usize;
    let x = pool.alloc(size as u64).unwrap();
    let y = pool.alloc(size as u64).unwrap();
    let a = pattern(5, size);
    let b = pattern(6, size);
    let mut buffer = staging.alloc_staging_buffer(size as u64).unwrap();
    occupy_gpu(gpu, &scratch);
    buffer
        .write_view()
        .unwrap()
        .as_write_only()
        .copy_from_slice(&a);
    buffer.upload_to(&x).unwrap();
    // Writing again waits until the copy to X is done, so X keeps pattern A.
    buffer.write_at(0, &b).unwrap();
    buffer.upload_to(&y).unwrap();
    drop(buffer); // in flight: its buffer returns to the cache when the GPU is done
    assert_eq!(staging.download(&x).unwrap(), a);
    assert_eq!(staging.download(&y).unwrap(), b);

    let mut readback = staging.alloc_readback_buffer(size as u64).unwrap();
    staging.download_to_readback(&x, &mut readback).unwrap();
    assert_eq!(readback.wait().unwrap(), size as u64);
    assert!(*readback.view().unwrap() == *a);
    occupy_gpu(gpu, &scratch);
    staging.download_to_readback(&y, &mut readback).unwrap();
    assert!(*readback.view().unwrap() == *b);
    // A smaller block into the same readback buffer: the view has its size.
    let small = pool.alloc(1000).unwrap();
    staging.upload(&small, &a[..1000]).unwrap();
    staging.download_to_readback(&small, &mut readback).unwrap();
    assert!(*readback.view().unwrap() == a[..1000]);
    occupy_gpu(gpu, &scratch);
    staging.download_to_readback(&x, &mut readback).unwrap();
    drop(readback); // in flight
    let stats = staging.stats();
    assert!(stats.download.buffers >= 1);
    assert_eq!(staging.download(&y).unwrap(), b);
}

#[test]
fn transfers_from_many_threads_keep_their_own_bytes() {
    let gpu = common::gpu();
    let pool = pool(gpu);
    let staging = staging(&pool);
    std::thread::scope(|scope| {
        for thread in 0..4u32 {
            let pool = pool.clone();
            let staging = staging.clone();
            scope.spawn(move || {
                for round in 0..6u32 {
                    let size =
                        1000 + (thread as usize * 70_001 + round as usize * 33_333) % 300_000;
                    let block = pool.alloc(size as u64).unwrap();
                    let data = pattern(thread * 100 + round, size);
                    staging.upload(&block, &data).unwrap();
                    assert_eq!(staging.download(&block).unwrap(), data);
                }
            });
        }
    });
    let stats = staging.stats();
    assert_eq!(stats.uploads, 24);
    assert_eq!(stats.total.allocated_bytes, stats.total.cached_bytes);
}

#[test]
fn bad_input_is_an_error_naming_what_is_allowed() {
    let gpu = common::gpu();
    let pool = pool(gpu);
    let staging = staging(&pool);
    let block = pool.alloc(100).unwrap();

    let error = staging.upload(&block, &[1u8; 101]).unwrap_err();
    assert!(matches!(
        error,
        StagingError::TooLong {
            len: 101,
            capacity: 100,
            ..
        }
    ));
    assert!(error.to_string().contains("at most 100 bytes"), "{error}");

    let error = staging.upload(&block, &[1u8; 5]).unwrap_err();
    assert!(matches!(
        error,
        StagingError::Unaligned {
            len: 5,
            size: 100,
            ..
        }
    ));
    assert!(error.to_string().contains("multiple of 4"), "{error}");
    // The whole block may have any length.
    staging.upload(&block, &[9u8; 100]).unwrap();

    let mut long = vec![0u8; 101];
    let error = staging.download_into(&block, &mut long).unwrap_err();
    assert!(matches!(
        error,
        StagingError::BeyondBlock {
            len: 101,
            size: 100,
            ..
        }
    ));
    assert!(error.to_string().contains("at most 100 bytes"), "{error}");

    let ticket = staging.download_async(&block).unwrap();
    let error = ticket.wait_into(&mut [0u8; 99]).unwrap_err();
    assert!(matches!(
        error,
        StagingError::LengthMismatch {
            expected: 100,
            got: 99,
            ..
        }
    ));

    let mut buffer = staging.alloc_staging_buffer(200).unwrap();
    let error = buffer.write_at(150, &[0u8; 51]).unwrap_err();
    assert!(matches!(
        error,
        StagingError::OutOfRange {
            offset: 150,
            end: 201,
            len: 200,
            ..
        }
    ));
    let error = buffer.upload_to(&block).unwrap_err();
    assert!(matches!(
        error,
        StagingError::TooLong {
            len: 200,
            capacity: 100,
            ..
        }
    ));
    let mut odd = staging.alloc_staging_buffer(50).unwrap();
    let error = odd.upload_to(&block).unwrap_err();
    assert!(matches!(
        error,
        StagingError::Unaligned {
            len: 50,
            size: 100,
            ..
        }
    ));

    let mut readback = staging.alloc_readback_buffer(64).unwrap();
    assert!(matches!(
        readback.view(),
        Err(StagingError::NothingDownloaded)
    ));
    let error = staging
        .download_to_readback(&block, &mut readback)
        .unwrap_err();
    assert!(matches!(
        error,
        StagingError::TooLong {
            len: 100,
            capacity: 64,
            ..
        }
    ));
    let mut readback = staging.alloc_readback_buffer(100).unwrap();
    staging.download_to_readback(&block, &mut readback).unwrap();
    let error = readback.read_into(&mut [0u8; 10]).unwrap_err();
    assert!(matches!(
        error,
        StagingError::LengthMismatch {
            expected: 100,
            got: 10,
            ..
        }
    ));

    let too_big = gpu.limits().max_buffer_size + 1;
    let error = staging.alloc_staging_buffer(too_big).unwrap_err();
    assert!(matches!(error, StagingError::TooLarge { .. }), "{error}");
    assert!(error.to_string().contains("max_buffer_size"), "{error}");

    for (options, name) in [
        (small_options().with_chunk_size(3 << 20), "chunk_size"),
        (small_options().with_chunk_size(4096), "chunk_size"),
        (small_options().with_threads(0), "threads"),
        (small_options().with_max_in_flight(0), "max_in_flight"),
        (
            small_options().with_min_bytes_per_thread(1),
            "min_bytes_per_thread",
        ),
    ] {
        let error = StagingPool::from_pool(&pool, options).unwrap_err();
        assert!(
            matches!(&error, StagingError::Option { name: n, .. } if *n == name),
            "{error}"
        );
        assert!(error.to_string().contains("allowed"), "{error}");
    }

    // A block of a pool without COPY_DST cannot be uploaded into.
    let read_only = Pool::with_options(
        gpu.device(),
        gpu.queue(),
        Config::default(),
        PoolOptions::default()
            .with_usage(wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC),
    )
    .unwrap();
    let other = read_only.alloc(64).unwrap();
    let error = staging.upload(&other, &[0u8; 64]).unwrap_err();
    assert!(matches!(
        error,
        StagingError::MissingUsage {
            needed: "COPY_DST",
            ..
        }
    ));
    assert!(error.to_string().contains("COPY_DST"), "{error}");
    assert_eq!(staging.download(&other).unwrap().len(), 64);

    // Nothing above broke the pool.
    staging.upload(&block, &[4u8; 100]).unwrap();
    assert_eq!(staging.download(&block).unwrap(), vec![4u8; 100]);
    assert!(gpu.errors().take_errors().is_empty());
}

#[test]
fn the_transfer_benchmark_verifies_and_reports_every_row() {
    let gpu = common::gpu();
    let config = TransferBenchConfig {
        size_bytes: (2 << 20) + 12,
        counts: RunCounts::new(1, 3),
        staging: StagingOptions::default().with_chunk_size(256 << 10),
    };
    let report = measure_transfers(gpu, &config).unwrap();
    assert!(report.verified);
    assert_eq!(report.rows.len(), 6);
    for row in &report.rows {
        assert!(row.gbps > 0.0 && row.verified, "{row:?}");
        assert!(
            row.min_s <= row.median_s && row.median_s <= row.max_s,
            "{row:?}"
        );
    }
    assert!(report.upload_gbps > 0.0 && report.map_read_gbps > 0.0);
    assert!(report.staging_stats.total.reuse_count > 0);
    let json = serde_json::to_value(&report).unwrap();
    assert!(
        json["staging_stats"]["upload"]["buffers_created"]
            .as_u64()
            .is_some()
    );
    let error = measure_transfers(gpu, &TransferBenchConfig::new(6)).unwrap_err();
    assert!(error.to_string().contains("multiple of 4"), "{error}");
}

/// The full benchmark at `WGPOOL_TRANSFER_BYTES` (default 64 MiB), printed as JSON:
/// `cargo test --release --test staging_gpu -- --ignored --nocapture transfer_report`.
/// `WGPOOL_STAGING_THREADS`, `WGPOOL_STAGING_CHUNK`, `WGPOOL_STAGING_IN_FLIGHT` and
/// `WGPOOL_TRANSFER_RUNS` override the staging settings and the timed run count.
#[test]
#[ignore = "a benchmark; run it explicitly"]
fn transfer_report() {
    let gpu = common::gpu();
    let size = std::env::var("WGPOOL_TRANSFER_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64u64 << 20);
    let mut config = TransferBenchConfig::new(size);
    let setting = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(threads) = setting("WGPOOL_STAGING_THREADS") {
        config.staging.threads = threads as usize;
    }
    if let Some(chunk) = setting("WGPOOL_STAGING_CHUNK") {
        config.staging.chunk_size = chunk;
    }
    if let Some(in_flight) = setting("WGPOOL_STAGING_IN_FLIGHT") {
        config.staging.max_in_flight = in_flight as usize;
    }
    if let Some(timed) = setting("WGPOOL_TRANSFER_RUNS") {
        config.counts.timed = timed as u32;
    }
    let report = measure_transfers(gpu, &config).unwrap();
    eprintln!("adapter: {} ({:?})", gpu.info().name, gpu.info().backend);
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
