//! Offload and prefetch rates: one pool block moved between device and host memory.

use std::time::Instant;

use serde::Serialize;

use super::residency_moves_error::ResidencyMovesError;
use crate::bench::timing::median;
use crate::config::Config;
use crate::gpu::GpuContext;
use crate::kernels::{KernelCall, Kernels};
use crate::pool::{Pool, Residency};

/// The `offload` / `prefetch` rows of `wgpool bench --transfers`.
#[derive(Debug, Clone, Serialize)]
pub struct ResidencyMoves {
    /// Block size, in bytes.
    pub size_bytes: u64,
    /// `Pool::offload` of the block, device to host, including the wait for the copy: GB/s
    /// of block bytes moved (10^9 bytes per second).
    pub offload_gbps: f64,
    /// `Pool::prefetch`, host to device, likewise.
    pub prefetch_gbps: f64,
    /// Timed moves of each kind; the rates are medians.
    pub timed_runs: u32,
    /// The block's checksum after every move equalled the one before the first.
    pub verified: bool,
}

/// Moves one block of `size` bytes (a multiple of 4) to host memory and back `warmup + runs`
/// times, timing each move from the call to the GPU's completion of the copy, and checks
/// with the checksum kernel that the contents survived every move.
///
/// # Errors
///
/// [`ResidencyMovesError`]: a call that failed, or contents that changed.
pub fn measure(
    gpu: &GpuContext,
    size: u64,
    warmup: u32,
    runs: u32,
) -> Result<ResidencyMoves, ResidencyMovesError> {
    let pool = Pool::from_context(gpu, Config::default())?;
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let mut block = pool.alloc(size)?;
    kernels.run(&KernelCall::fill_pattern(block.operand(), 0x0FF_10AD))?;
    let expected = kernels.checksum(block.operand())?;
    let wait = || gpu.wait_idle();
    let (mut offloads, mut prefetches) = (Vec::new(), Vec::new());
    let mut verified = true;
    for run in 0..warmup + runs {
        wait()?;
        let start = Instant::now();
        pool.offload(&mut block)?;
        wait()?;
        let offload = start.elapsed().as_secs_f64();
        debug_assert_eq!(block.residency(), Residency::Host);
        let start = Instant::now();
        pool.prefetch(&mut block)?;
        wait()?;
        let prefetch = start.elapsed().as_secs_f64();
        verified &= kernels.checksum(block.operand())? == expected;
        if run >= warmup {
            offloads.push(size as f64 / offload / 1e9);
            prefetches.push(size as f64 / prefetch / 1e9);
        }
    }
    if !verified {
        return Err(ResidencyMovesError::Verification);
    }
    Ok(ResidencyMoves {
        size_bytes: size,
        offload_gbps: median(&offloads),
        prefetch_gbps: median(&prefetches),
        timed_runs: runs,
        verified,
    })
}
