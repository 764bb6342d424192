//! Host transfer rates: the staging pool against wgpu's convenient paths, in one run, each
//! verified before it is reported.
//!
//! Rows (GB/s = bytes / median wall seconds / 1e9, every run waits until the data has
//! arrived):
//! - `upload`: [`StagingPool::upload`] from a user slice, until the GPU has finished;
//! - `download`: [`StagingPool::download_into`] a pre-faulted user slice;
//! - `staging_buffer_upload`: [`StagingBuffer::upload_to`] plus [`StagingBuffer::wait`],
//!   with the buffer filled in place beforehand (untimed): the DMA alone;
//! - `readback_buffer_download`: [`StagingPool::download_to_readback`] plus
//!   [`ReadbackBuffer::wait`]: the DMA alone, bytes left in place;
//! - `write_buffer`: `queue.write_buffer` of the whole block, submit, wait;
//! - `map_read`: [`read_region`], a fresh `MAP_READ` buffer mapped and copied out.
//!
//! Each row writes (or reads) its own byte pattern, and the block's bytes are compared with
//! it through an independent path after the timed runs; a mismatch is an error, not a
//! number.
//!
//! ```no_run
//! use wgpool::bench::transfers::{TransferBenchConfig, measure_transfers};
//! use wgpool::gpu::{GpuContext, HeadlessOptions};
//! let gpu = GpuContext::headless(&HeadlessOptions::default())?;
//! let report = measure_transfers(&gpu, &TransferBenchConfig::new(64 << 20))?;
//! println!("{}", serde_json::to_string_pretty(&report)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`StagingBuffer::upload_to`]: crate::staging::StagingBuffer::upload_to
//! [`StagingBuffer::wait`]: crate::staging::StagingBuffer::wait
//! [`ReadbackBuffer::wait`]: crate::staging::ReadbackBuffer::wait

use std::time::Instant;

use serde::Serialize;

use crate::bench::timing::{RunCounts, median};
use crate::config::Config;
use crate::engine::AllocError;
use crate::gpu::GpuContext;
use crate::gpu::scope::{CaughtError, catch};
use crate::gpu::transfer::{TransferError, read_region};
use crate::pool::{Block, Pool, PoolError};
use crate::staging::{StagingError, StagingOptions, StagingPool, StagingStats};

/// What to measure.
#[derive(Debug, Clone)]
pub struct TransferBenchConfig {
    /// Bytes per transfer; a positive multiple of 4 within the device's `max_buffer_size`
    /// (1 GiB on an H200, a few MiB on lavapipe).
    pub size_bytes: u64,
    /// Warm-up and timed runs of every row; the median is over the timed runs.
    pub counts: RunCounts,
    /// Settings of the staging pool under test.
    pub staging: StagingOptions,
}

impl TransferBenchConfig {
    /// `size_bytes` per transfer, 2 warm-up and 7 timed runs, default staging settings.
    pub fn new(size_bytes: u64) -> TransferBenchConfig {
        TransferBenchConfig {
            size_bytes,
            counts: RunCounts::new(2, 7),
            staging: StagingOptions::default(),
        }
    }
}

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct TransferRow {
    /// Short name, as in the report's `*_gbps` fields.
    pub name: String,
    /// What one run does.
    pub what: String,
    /// GB/s (10^9 bytes per second) at the median run time.
    pub gbps: f64,
    /// Median seconds per run.
    pub median_s: f64,
    /// Fastest run, seconds.
    pub min_s: f64,
    /// Slowest run, seconds.
    pub max_s: f64,
    /// Whether the bytes were checked after the runs (always true in a returned report).
    pub verified: bool,
}

/// The transfer section of a benchmark report. Public and open to more rows (offload,
/// prefetch): add them to `rows`; the named `*_gbps` fields repeat the basic rows.
#[derive(Debug, Clone, Serialize)]
pub struct TransferReport {
    /// Bytes per transfer.
    pub size_bytes: u64,
    /// [`StagingPool::upload`] from a user slice.
    pub upload_gbps: f64,
    /// [`StagingPool::download_into`] a pre-faulted slice.
    pub download_gbps: f64,
    /// A filled staging buffer's upload (the DMA alone).
    pub staging_buffer_upload_gbps: f64,
    /// A download into a readback buffer (the DMA alone).
    pub readback_buffer_download_gbps: f64,
    /// Baseline: `queue.write_buffer`.
    pub write_buffer_gbps: f64,
    /// Baseline: map-and-read of a fresh buffer ([`read_region`]).
    pub map_read_gbps: f64,
    /// Copy threads of the staging pool.
    pub threads: usize,
    /// Chunk size of the staging pool.
    pub chunk_size: u64,
    /// Chunks in flight per transfer.
    pub max_in_flight: usize,
    /// Timed runs per row.
    pub timed_runs: u32,
    /// Every row, in the order measured.
    pub rows: Vec<TransferRow>,
    /// The staging pool's statistics after all rows.
    pub staging_stats: StagingStats,
    /// Every row's bytes were verified (a failure is an error instead of a report).
    pub verified: bool,
}

/// Why the transfer benchmark failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransferBenchError {
    /// The settings cannot work on this device.
    #[error("transfer benchmark settings: {0}")]
    Config(String),
    /// The pool could not be created.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The block could not be allocated.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// A staging transfer failed.
    #[error(transparent)]
    Staging(#[from] StagingError),
    /// A baseline transfer failed.
    #[error(transparent)]
    Transfer(#[from] TransferError),
    /// wgpu reported an error.
    #[error(transparent)]
    Gpu(#[from] CaughtError),
    /// Waiting for the device failed.
    #[error("waiting for the device failed: {0}")]
    Poll(#[from] wgpu::PollError),
    /// The bytes that arrived are not the bytes sent.
    #[error("VERIFICATION FAILED: {row}: {detail}")]
    Verification {
        /// The row.
        row: String,
        /// Where the bytes differ.
        detail: String,
    },
}

/// Runs every row at `config.size_bytes` on a fresh pool block and staging pool.
pub fn measure_transfers(
    gpu: &GpuContext,
    config: &TransferBenchConfig,
) -> Result<TransferReport, TransferBenchError> {
    let size = config.size_bytes;
    let max = gpu.limits().max_buffer_size;
    if size == 0 || size % 4 != 0 || size > max {
        return Err(TransferBenchError::Config(format!(
            "size {size} must be a positive multiple of 4 bytes, at most max_buffer_size {max}"
        )));
    }
    if config.counts.timed == 0 {
        return Err(TransferBenchError::Config(
            "at least one timed run is needed".into(),
        ));
    }
    let (device, queue) = (gpu.device(), gpu.queue());
    let pool = Pool::from_context(gpu, Config::default())?;
    let block = pool.alloc(size)?;
    let staging = StagingPool::from_pool(&pool, config.staging.clone())?;
    let counts = &config.counts;
    let mut rows = Vec::new();
    let mut data = vec![0u8; size as usize];
    let check = |row: &str, data: &[u8], block: &Block| -> Result<(), TransferBenchError> {
        let got = read_region(device, queue, block.place().0, block.place().1, size)?;
        verify(row, data, &got)
    };

    fill_pattern(&mut data, 1);
    let samples = time_runs(counts, || staging.upload(&block, &data).map_err(Into::into))?;
    check("upload", &data, &block)?;
    rows.push(row(
        "upload",
        "StagingPool::upload from a slice",
        size,
        &samples,
    ));

    fill_pattern(&mut data, 2);
    let mut buffer = staging.alloc_staging_buffer(size)?;
    buffer.write_at(0, &data)?;
    let samples = time_runs(counts, || {
        buffer.upload_to(&block)?;
        buffer.wait().map_err(Into::into)
    })?;
    check("staging_buffer_upload", &data, &block)?;
    drop(buffer);
    rows.push(row(
        "staging_buffer_upload",
        "StagingBuffer::upload_to + wait, filled in place beforehand",
        size,
        &samples,
    ));

    fill_pattern(&mut data, 3);
    let samples = time_runs(counts, || {
        let index = catch(device, || {
            queue.write_buffer(block.place().0, block.place().1, &data);
            queue.submit([])
        })?;
        device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })?;
        Ok(())
    })?;
    check("write_buffer", &data, &block)?;
    rows.push(row(
        "write_buffer",
        "queue.write_buffer + submit + wait",
        size,
        &samples,
    ));

    // Downloads read pattern 4, written once through the staging pool and checked.
    fill_pattern(&mut data, 4);
    staging.upload(&block, &data)?;
    check("download source", &data, &block)?;
    let mut out = vec![0u8; size as usize];
    // Pre-fault: touch every page of the destination.
    out.fill(0xA5);
    let samples = time_runs(counts, || {
        staging.download_into(&block, &mut out).map_err(Into::into)
    })?;
    verify("download", &data, &out)?;
    rows.push(row(
        "download",
        "StagingPool::download_into a pre-faulted slice",
        size,
        &samples,
    ));

    let mut readback = staging.alloc_readback_buffer(size)?;
    let samples = time_runs(counts, || {
        staging.download_to_readback(&block, &mut readback)?;
        readback.wait().map(drop).map_err(Into::into)
    })?;
    verify("readback_buffer_download", &data, &readback.view()?)?;
    drop(readback);
    rows.push(row(
        "readback_buffer_download",
        "StagingPool::download_to_readback + wait, bytes read in place",
        size,
        &samples,
    ));

    let mut last = Vec::new();
    let samples = time_runs(counts, || {
        last = read_region(device, queue, block.place().0, block.place().1, size)?;
        Ok(())
    })?;
    verify("map_read", &data, &last)?;
    rows.push(row(
        "map_read",
        "gpu::transfer::read_region (fresh MAP_READ buffer, map, copy out)",
        size,
        &samples,
    ));

    let gbps = |name: &str| rows.iter().find(|r| r.name == name).map_or(0.0, |r| r.gbps);
    Ok(TransferReport {
        size_bytes: size,
        upload_gbps: gbps("upload"),
        download_gbps: gbps("download"),
        staging_buffer_upload_gbps: gbps("staging_buffer_upload"),
        readback_buffer_download_gbps: gbps("readback_buffer_download"),
        write_buffer_gbps: gbps("write_buffer"),
        map_read_gbps: gbps("map_read"),
        threads: config.staging.threads,
        chunk_size: config.staging.chunk_size,
        max_in_flight: config.staging.max_in_flight,
        timed_runs: counts.timed,
        staging_stats: staging.stats(),
        rows,
        verified: true,
    })
}

/// Warm-up runs (at least `counts.warmup`, and for at least `counts.min_warmup`), then the
/// timed runs' wall seconds.
fn time_runs(
    counts: &RunCounts,
    mut run: impl FnMut() -> Result<(), TransferBenchError>,
) -> Result<Vec<f64>, TransferBenchError> {
    let start = Instant::now();
    let mut warmups = 0;
    while warmups < counts.warmup || start.elapsed() < counts.min_warmup {
        run()?;
        warmups += 1;
    }
    let mut samples = Vec::with_capacity(counts.timed as usize);
    for _ in 0..counts.timed {
        let began = Instant::now();
        run()?;
        samples.push(began.elapsed().as_secs_f64());
    }
    Ok(samples)
}

fn row(name: &str, what: &str, size: u64, samples: &[f64]) -> TransferRow {
    let median_s = median(samples);
    TransferRow {
        name: name.into(),
        what: what.into(),
        gbps: if median_s > 0.0 {
            size as f64 / median_s / 1e9
        } else {
            0.0
        },
        median_s,
        min_s: samples.iter().copied().fold(f64::INFINITY, f64::min),
        max_s: samples.iter().copied().fold(0.0, f64::max),
        verified: true,
    }
}

fn verify(row: &str, expected: &[u8], got: &[u8]) -> Result<(), TransferBenchError> {
    if expected == got {
        return Ok(());
    }
    let detail = if expected.len() != got.len() {
        format!("{} bytes expected, {} arrived", expected.len(), got.len())
    } else {
        let at = expected
            .iter()
            .zip(got)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        format!(
            "first difference at byte {at}: expected {:#04x}, got {:#04x}",
            expected[at], got[at]
        )
    };
    Err(TransferBenchError::Verification {
        row: row.into(),
        detail,
    })
}

/// Fills `data` with a pattern unique to `seed`, on several threads.
fn fill_pattern(data: &mut [u8], seed: u64) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let piece = (data.len() / threads).div_ceil(8).max(1) * 8;
    std::thread::scope(|scope| {
        for (index, part) in data.chunks_mut(piece).enumerate() {
            scope.spawn(move || {
                let base = (index * piece / 8) as u64;
                let mut words = part.chunks_exact_mut(8);
                for (i, word) in words.by_ref().enumerate() {
                    word.copy_from_slice(&splitmix(seed, base + i as u64).to_le_bytes());
                }
                let tail = words.into_remainder();
                let last = splitmix(seed, u64::MAX).to_le_bytes();
                tail.copy_from_slice(&last[..tail.len()]);
            });
        }
    });
}

fn splitmix(seed: u64, index: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(index.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
