//! `wgpool bench --oversubscription`: work over more pool memory than the device budget,
//! served four ways side by side, against the pool's own host-to-device rate.
//!
//! - **residency**: a pool in pages mode with [`ResidencyOptions`] under the budget; it evicts
//!   the least recently used blocks to host memory and restores them on use, at the same
//!   buffer and offset. Nothing is declared, so every eviction copies out and every restore
//!   copies in;
//! - **residency_declared**: the same pool, the application declaring what it knows: the
//!   blocks that are only read are read-only ([`Pool::set_read_only`]: evicted again without
//!   a copy) and each step discards the block it overwrites ([`Pool::discard`]: restored
//!   without a copy);
//! - **overflow_host**: `overflow:host` with the pool capped at the budget; blocks past the
//!   cap live in host memory for good and kernels read and write them there (zero-copy);
//! - **offload_prefetch**: a pool without residency, the application moving blocks by hand
//!   with [`Pool::offload`] and [`Pool::prefetch`] to keep its live device blocks under the
//!   budget, oldest first (the pool has no cap: device memory an offload frees stays in its
//!   cache and serves the next prefetch without a bind);
//! - **in_budget**: the same steps with nothing moved (for the stream, a working set inside
//!   the budget; for the hot set, a pool that holds the cold blocks on the device too).
//!
//! Two workloads:
//! - a **stream** over a working set of 1.5x and 3x the budget: block pairs `(2j, 2j + 1)`,
//!   each step copies block `2j` into block `2j + 1` with the copy kernel, and a pass visits
//!   every pair once, so every block is touched once a pass and, past the budget, every
//!   step reads and writes blocks that are not on the device;
//! - a **hot set** of half the budget run the same way while cold blocks of 1.5x the budget
//!   are allocated and filled beside it: after the first pass the hot set should run as if
//!   nothing were evicted.
//!
//! Figures count bytes read plus bytes written by the kernels (2x the block size per step),
//! 10^9 bytes per second. The baseline is the pool's own host-to-device rate in the same
//! run: `copy_buffer_to_buffer` from a block in the pool's host memory to a block on the
//! device, the rate the link gives the pool's buffers (`host_to_device_gbps`); the report
//! also gives [`residency_moves`](super::residency_moves)' `Pool::prefetch` and
//! `Pool::offload` rates for one block. The hot set's timed passes are four times the
//! stream's, in interleaved rounds, since a pass is short. Every block's contents are checked with the checksum kernel after the timed
//! passes (evicted blocks are restored for it); a mismatch fails the run.

use std::time::Instant;

use serde::Serialize;

use crate::bench::residency_moves;
use crate::bench::timing::median;
use crate::bench::{BenchError, MismatchError};
use crate::config::Config;
use crate::gpu::GpuContext;
use crate::kernels::{KernelCall, Kernels};
use crate::pool::{Block, Pool, PoolOptions, Residency, ResidencyOptions};

/// Working sets of the stream, as multiples of the budget (the issue's 1.5x and 3x).
pub const STREAM_FACTORS: [f64; 2] = [1.5, 3.0];

/// The hot set, as a fraction of the budget.
const HOT_FRACTION: f64 = 0.5;

/// The cold blocks beside the hot set, as a multiple of the budget.
const COLD_FACTOR: f64 = 1.5;

/// The stream's working set when nothing has to move, as a fraction of the budget.
const IN_BUDGET_FACTOR: f64 = 0.5;

/// What [`measure`] runs.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct OversubscriptionConfig {
    /// Size of every block, in bytes (a multiple of 4).
    pub block_bytes: u64,
    /// The device budget, in bytes: at least four blocks.
    pub budget_bytes: u64,
    /// Untimed passes before the timed ones.
    pub warmup_passes: u32,
    /// Timed passes; figures are medians over them.
    pub timed_passes: u32,
}

impl OversubscriptionConfig {
    /// Blocks of `block_bytes` under a budget of `budget_bytes`, one warm-up pass and three
    /// timed ones.
    pub fn new(block_bytes: u64, budget_bytes: u64) -> OversubscriptionConfig {
        OversubscriptionConfig {
            block_bytes,
            budget_bytes,
            warmup_passes: 1,
            timed_passes: 3,
        }
    }

    /// With `warmup` untimed and `timed` timed passes.
    pub fn with_passes(mut self, warmup: u32, timed: u32) -> Self {
        self.warmup_passes = warmup;
        self.timed_passes = timed;
        self
    }

    /// The checks [`measure`] makes before it runs anything, for a caller that runs other
    /// work first: [`BenchError::Config`] for a block size that is not a positive multiple
    /// of 4, a budget under four blocks, or no timed pass.
    ///
    /// ```
    /// use wgpool::bench::oversubscription::OversubscriptionConfig;
    /// assert!(OversubscriptionConfig::new(1 << 20, 4 << 20).validate().is_ok());
    /// let error = OversubscriptionConfig::new(1 << 20, 1 << 20).validate().unwrap_err();
    /// assert!(error.to_string().contains("fewer than four blocks"));
    /// ```
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.block_bytes == 0 || self.block_bytes % 4 != 0 {
            return Err(BenchError::Config(format!(
                "oversubscription: blocks of {} bytes; they must be a positive multiple of 4",
                self.block_bytes
            )));
        }
        if self.budget_bytes < 4 * self.block_bytes {
            return Err(BenchError::Config(format!(
                "oversubscription: a budget of {} bytes holds fewer than four blocks of {}",
                self.budget_bytes, self.block_bytes
            )));
        }
        if self.timed_passes == 0 {
            return Err(BenchError::Config(
                "oversubscription: at least one timed pass is needed".into(),
            ));
        }
        Ok(())
    }
}

/// How the blocks over the budget are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The pool's residency: evict least recently used blocks, restore on use.
    Residency,
    /// Residency with read-only sources and discarded outputs declared.
    ResidencyDeclared,
    /// `overflow:host`: blocks past the cap stay in host memory, used in place.
    OverflowHost,
    /// `Pool::offload` and `Pool::prefetch` by hand, oldest block first.
    OffloadPrefetch,
    /// Nothing over the budget, nothing moved: the speed to compare with.
    InBudget,
}

impl Strategy {
    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Residency => "residency",
            Strategy::ResidencyDeclared => "residency_declared",
            Strategy::OverflowHost => "overflow_host",
            Strategy::OffloadPrefetch => "offload_prefetch",
            Strategy::InBudget => "in_budget",
        }
    }
}

/// One row of the stream.
#[derive(Debug, Clone, Serialize)]
pub struct StreamRow {
    /// How blocks over the budget were served.
    pub strategy: Strategy,
    /// The working set over the budget (0.5 for `in_budget`).
    pub working_set_over_budget: f64,
    /// Blocks in the working set.
    pub blocks: u64,
    /// Bytes in the working set.
    pub working_set_bytes: u64,
    /// Median seconds of a timed pass.
    pub pass_seconds: f64,
    /// Bytes the kernels read and wrote per second.
    pub effective_gbps: f64,
    /// `effective_gbps` over the pool's host-to-device rate (`host_to_device_gbps`).
    pub over_host_to_device: f64,
    /// Bytes moved to the device per second during the timed passes (restores or
    /// prefetches; 0 for `overflow_host` and `in_budget`).
    pub to_device_gbps: f64,
    /// Bytes moved to host memory per second likewise (evictions or offloads).
    pub to_host_gbps: f64,
}

/// One row of the hot set.
#[derive(Debug, Clone, Serialize)]
pub struct HotSetRow {
    /// How the cold blocks were served.
    pub strategy: Strategy,
    /// Median seconds of a timed pass over the hot set.
    pub pass_seconds: f64,
    /// Bytes the kernels read and wrote per second.
    pub effective_gbps: f64,
    /// Speed over `in_budget`'s in the same rounds (the bar is 0.98 or more).
    pub over_in_budget: f64,
    /// Bytes moved either way during the timed passes (nothing should move once the hot
    /// set is on the device).
    pub moved_bytes: u64,
}

/// A strategy the device cannot run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// The strategy.
    pub strategy: Strategy,
    /// The capability it needs and what the device lacks.
    pub reason: String,
}

/// The `oversubscription` object of `wgpool bench --json`.
#[derive(Debug, Clone, Serialize)]
pub struct OversubscriptionReport {
    /// Size of every block.
    pub block_bytes: u64,
    /// The device budget.
    pub budget_bytes: u64,
    /// `copy_buffer_to_buffer` of one block from the pool's host memory to the device, GB/s
    /// (median of 7): the baseline of the stream's `over_host_to_device`.
    pub host_to_device_gbps: f64,
    /// The same copy the other way.
    pub device_to_host_gbps: f64,
    /// `Pool::prefetch` of one block, host to device, GB/s (it places the block and copies).
    pub prefetch_gbps: f64,
    /// The pool's device-to-host rate (`Pool::offload`), GB/s.
    pub offload_gbps: f64,
    /// Timed passes per figure.
    pub timed_passes: u32,
    /// The stream's rows: `in_budget`, then each strategy at each working set.
    pub stream: Vec<StreamRow>,
    /// Hot set bytes.
    pub hot_bytes: u64,
    /// Cold bytes beside it.
    pub cold_bytes: u64,
    /// The hot set's rows.
    pub hot_set: Vec<HotSetRow>,
    /// Strategies not run on this device.
    pub skipped: Vec<Skipped>,
    /// Every block held the data it should after the timed passes (the run fails
    /// otherwise).
    pub verified: bool,
}

/// Blocks of one pool, with the checksum each should have.
struct Blocks {
    pool: Pool,
    strategy: Strategy,
    blocks: Vec<Block>,
    /// Checksum of the pattern each block was filled with.
    filled: Vec<u32>,
    /// Blocks on the device, oldest use first (`offload_prefetch` only).
    resident: std::collections::VecDeque<usize>,
    budget_blocks: usize,
    /// Bytes the hand strategy moved.
    hand_moved: Moved,
}

/// Moved bytes of a pool: to the device, to host.
#[derive(Debug, Clone, Copy, Default)]
struct Moved {
    to_device: u64,
    to_host: u64,
}

impl Blocks {
    /// A pool for `strategy` holding `count` blocks, each filled with its own pattern.
    fn new(
        gpu: &GpuContext,
        kernels: &Kernels,
        strategy: Strategy,
        config: &OversubscriptionConfig,
        count: usize,
    ) -> Result<Blocks, BenchError> {
        let budget_mb = config.budget_bytes.div_ceil(1 << 20);
        let (conf, options) = match strategy {
            Strategy::Residency | Strategy::ResidencyDeclared => (
                "expandable_segments:True".to_string(),
                PoolOptions::default().with_residency(
                    ResidencyOptions::new().with_device_budget(config.budget_bytes),
                ),
            ),
            Strategy::OverflowHost => (
                format!("overflow:host,memory_limit_mb:{budget_mb}"),
                PoolOptions::default(),
            ),
            Strategy::OffloadPrefetch | Strategy::InBudget => {
                (String::new(), PoolOptions::default())
            }
        };
        let parsed = Config::parse(&conf).map_err(|e| BenchError::Config(e.to_string()))?;
        let pool = Pool::from_context_with(gpu, parsed, options.with_label(strategy.name()))
            .map_err(|source| BenchError::Pool {
                conf: conf.clone(),
                source: Box::new(source),
            })?;
        let mut set = Blocks {
            pool,
            strategy,
            blocks: Vec::with_capacity(count),
            filled: Vec::with_capacity(count),
            resident: Default::default(),
            budget_blocks: (config.budget_bytes / config.block_bytes) as usize,
            hand_moved: Moved::default(),
        };
        for index in 0..count {
            let block = set
                .pool
                .alloc(config.block_bytes)
                .map_err(|source| BenchError::Alloc {
                    size: config.block_bytes,
                    source: Box::new(source),
                })?;
            set.blocks.push(block);
            set.before_use(&[index])?;
            let block = &set.blocks[index];
            kernels.run(&KernelCall::fill_pattern(
                block.operand(),
                0x5EED_0000 ^ index as u32,
            ))?;
            set.pool.mark_submitted();
            set.filled.push(kernels.checksum(block.operand())?);
            set.pool.mark_submitted();
            if strategy == Strategy::ResidencyDeclared && index % 2 == 0 {
                // Even blocks are the steps' sources: only read from now on.
                set.pool.set_read_only(block, true)?;
            }
        }
        Ok(set)
    }

    /// The hand strategy's moves before a step uses `indices`: prefetch them, then offload
    /// the oldest others until the resident blocks fit the budget.
    fn before_use(&mut self, indices: &[usize]) -> Result<(), BenchError> {
        if self.strategy != Strategy::OffloadPrefetch {
            return Ok(());
        }
        for &index in indices {
            if self.blocks[index].residency() == Residency::Host {
                self.pool.prefetch(&mut self.blocks[index])?;
                self.hand_moved.to_device += self.blocks[index].size();
            }
            self.resident.retain(|&i| i != index);
            self.resident.push_back(index);
        }
        while self.resident.len() > self.budget_blocks.max(indices.len()) {
            let Some(oldest) = self.resident.pop_front() else {
                break;
            };
            self.offload(oldest)?;
        }
        Ok(())
    }

    /// Offloads block `index` by hand.
    fn offload(&mut self, index: usize) -> Result<(), BenchError> {
        if self.blocks[index].residency() == Residency::Device {
            self.pool.offload(&mut self.blocks[index])?;
            self.hand_moved.to_host += self.blocks[index].size();
        }
        Ok(())
    }

    /// One step: `dst = src` by the copy kernel, then a submission point.
    fn step(&mut self, kernels: &Kernels, src: usize, dst: usize) -> Result<(), BenchError> {
        self.before_use(&[src, dst])?;
        if self.strategy == Strategy::ResidencyDeclared {
            // The copy overwrites every byte of `dst`.
            self.pool.discard(&self.blocks[dst])?;
        }
        kernels.run(&KernelCall::move_bytes(
            self.blocks[src].operand(),
            self.blocks[dst].operand(),
        ))?;
        self.pool.mark_submitted();
        Ok(())
    }

    /// One pass over the pairs of `indices`, waited for; returns its seconds.
    fn pass(
        &mut self,
        gpu: &GpuContext,
        kernels: &Kernels,
        indices: std::ops::Range<usize>,
    ) -> Result<f64, BenchError> {
        wait(gpu)?;
        let start = Instant::now();
        for pair in indices.step_by(2) {
            self.step(kernels, pair, pair + 1)?;
        }
        wait(gpu)?;
        Ok(start.elapsed().as_secs_f64())
    }

    /// Bytes moved so far by residency or by hand.
    fn moved(&self) -> Moved {
        if let Some(stats) = self.pool.residency_stats() {
            return Moved {
                to_device: stats.copied_in_bytes_total,
                to_host: stats.copied_out_bytes_total,
            };
        }
        self.hand_moved
    }

    /// Checks every block: a block that was written (odd, within `written`) holds its
    /// pair's pattern, every other block its own.
    fn verify(
        &mut self,
        kernels: &Kernels,
        written: std::ops::Range<usize>,
    ) -> Result<(), BenchError> {
        for index in 0..self.blocks.len() {
            let expected = if written.contains(&index) && index % 2 == 1 {
                self.filled[index - 1]
            } else {
                self.filled[index]
            };
            self.before_use(&[index])?;
            let found = kernels.checksum(self.blocks[index].operand())?;
            self.pool.mark_submitted();
            if found != expected {
                return Err(BenchError::Verification {
                    kernel: "copy_u32".into(),
                    placement: format!(
                        "{} (block {index} of {})",
                        self.strategy.name(),
                        self.blocks.len()
                    ),
                    source: MismatchError::Word {
                        word: 0,
                        detail: format!(
                            "checksum {found:#010x}, {expected:#010x} when it was filled"
                        ),
                    },
                });
            }
        }
        Ok(())
    }
}

fn wait(gpu: &GpuContext) -> Result<(), BenchError> {
    gpu.wait_idle().map_err(BenchError::Wait)
}

/// Copy rates between the pool's host memory and the device, GB/s.
struct LinkRates {
    to_device: f64,
    to_host: f64,
}

/// Times `copy_buffer_to_buffer` of one block between a block of a pool's host memory (an
/// offloaded block) and a device block, each way: two warm-up copies, then the median of 7.
fn link_rates(gpu: &GpuContext, size: u64) -> Result<LinkRates, BenchError> {
    let pool = Pool::from_context(gpu, Config::default()).map_err(|source| BenchError::Pool {
        conf: String::new(),
        source: Box::new(source),
    })?;
    let alloc = || {
        pool.alloc(size).map_err(|source| BenchError::Alloc {
            size,
            source: Box::new(source),
        })
    };
    let device = alloc()?;
    let mut host = alloc()?;
    pool.offload(&mut host)?;
    let time = |from: &Block, to: &Block| -> Result<f64, BenchError> {
        let mut seconds = Vec::new();
        for run in 0..9 {
            wait(gpu)?;
            let start = Instant::now();
            let mut encoder = gpu.device().create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(
                from.buffer(),
                from.offset(),
                to.buffer(),
                to.offset(),
                size,
            );
            pool.submit([encoder.finish()]);
            wait(gpu)?;
            if run >= 2 {
                seconds.push(start.elapsed().as_secs_f64());
            }
        }
        Ok(size as f64 / median(&seconds) / 1e9)
    };
    Ok(LinkRates {
        to_device: time(&host, &device)?,
        to_host: time(&device, &host)?,
    })
}

/// An even number of blocks, at least 2, holding `factor` times `budget` bytes.
fn even_blocks(factor: f64, config: &OversubscriptionConfig) -> usize {
    let blocks = (factor * config.budget_bytes as f64 / config.block_bytes as f64).ceil() as usize;
    (blocks.div_ceil(2) * 2).max(2)
}

/// Runs the stream and the hot set under every strategy the device offers.
///
/// # Errors
///
/// [`BenchError::Config`] for a budget under four blocks or a block size that is not a
/// multiple of 4; [`BenchError::Verification`] when a block lost its data; the pools',
/// kernels' and moves' errors.
pub fn measure(
    gpu: &GpuContext,
    config: &OversubscriptionConfig,
) -> Result<OversubscriptionReport, BenchError> {
    config.validate()?;
    let moves = residency_moves::measure(gpu, config.block_bytes, 1, 5)?;
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let link = link_rates(gpu, config.block_bytes)?;
    let capabilities = gpu.capabilities();
    let mut skipped = Vec::new();
    let mut strategies = Vec::new();
    for strategy in [
        Strategy::Residency,
        Strategy::ResidencyDeclared,
        Strategy::OverflowHost,
        Strategy::OffloadPrefetch,
    ] {
        let support = match strategy {
            Strategy::Residency | Strategy::ResidencyDeclared => &capabilities.page_mapping,
            Strategy::OverflowHost => &capabilities.host_overflow,
            _ => {
                strategies.push(strategy);
                continue;
            }
        };
        if support.is_available() {
            strategies.push(strategy);
        } else {
            skipped.push(Skipped {
                strategy,
                reason: support.text().to_string(),
            });
        }
    }

    let mut stream = Vec::new();
    let stream_row = |strategy: Strategy, factor: f64| -> Result<StreamRow, BenchError> {
        let count = even_blocks(factor, config);
        let mut set = Blocks::new(gpu, &kernels, strategy, config, count)?;
        for _ in 0..config.warmup_passes {
            set.pass(gpu, &kernels, 0..count)?;
        }
        let before = set.moved();
        let mut seconds = Vec::new();
        for _ in 0..config.timed_passes {
            seconds.push(set.pass(gpu, &kernels, 0..count)?);
        }
        let after = set.moved();
        let total: f64 = seconds.iter().sum();
        set.verify(&kernels, 0..count)?;
        let pass_seconds = median(&seconds);
        let bytes = count as u64 * config.block_bytes;
        let effective_gbps = bytes as f64 / pass_seconds / 1e9;
        Ok(StreamRow {
            strategy,
            working_set_over_budget: factor,
            blocks: count as u64,
            working_set_bytes: bytes,
            pass_seconds,
            effective_gbps,
            over_host_to_device: effective_gbps / link.to_device,
            to_device_gbps: (after.to_device - before.to_device) as f64 / total / 1e9,
            to_host_gbps: (after.to_host - before.to_host) as f64 / total / 1e9,
        })
    };
    stream.push(stream_row(Strategy::InBudget, IN_BUDGET_FACTOR)?);
    for factor in STREAM_FACTORS {
        for &strategy in &strategies {
            stream.push(stream_row(strategy, factor)?);
        }
    }

    // The hot set: every pool holds hot blocks first, then cold ones; the hot pairs run in
    // interleaved rounds, one pass per pool a round.
    let hot = even_blocks(HOT_FRACTION, config);
    let cold = even_blocks(COLD_FACTOR, config);
    let mut sets = Vec::new();
    for strategy in std::iter::once(Strategy::InBudget).chain(strategies.iter().copied()) {
        let mut set = Blocks::new(gpu, &kernels, strategy, config, hot + cold)?;
        if strategy == Strategy::OffloadPrefetch {
            // The hand strategy keeps the cold blocks in host memory.
            for index in hot..hot + cold {
                set.offload(index)?;
            }
            set.resident.retain(|&i| i < hot);
        }
        for _ in 0..config.warmup_passes.max(1) {
            set.pass(gpu, &kernels, 0..hot)?;
        }
        sets.push((set, Vec::new(), Moved::default()));
    }
    for (set, _, moved) in &mut sets {
        *moved = set.moved();
    }
    for _ in 0..4 * config.timed_passes {
        for (set, seconds, _) in &mut sets {
            seconds.push(set.pass(gpu, &kernels, 0..hot)?);
        }
    }
    let in_budget = median(&sets[0].1);
    let mut hot_set = Vec::new();
    for (set, seconds, before) in &mut sets {
        let after = set.moved();
        set.verify(&kernels, 0..hot)?;
        let pass_seconds = median(seconds);
        hot_set.push(HotSetRow {
            strategy: set.strategy,
            pass_seconds,
            effective_gbps: (hot as u64 * config.block_bytes) as f64 / pass_seconds / 1e9,
            over_in_budget: in_budget / pass_seconds,
            moved_bytes: (after.to_device - before.to_device) + (after.to_host - before.to_host),
        });
    }
    Ok(OversubscriptionReport {
        block_bytes: config.block_bytes,
        budget_bytes: config.budget_bytes,
        host_to_device_gbps: link.to_device,
        device_to_host_gbps: link.to_host,
        prefetch_gbps: moves.prefetch_gbps,
        offload_gbps: moves.offload_gbps,
        timed_passes: config.timed_passes,
        stream,
        hot_bytes: hot as u64 * config.block_bytes,
        cold_bytes: cold as u64 * config.block_bytes,
        hot_set,
        skipped,
        verified: true,
    })
}
