//! Why a benchmark run failed.

use crate::bench::timing::TimingError;
use crate::bench::{MismatchError, ResidencyMovesError};
use crate::engine::AllocError;
use crate::gpu::scope::CaughtError;
use crate::gpu::transfer::TransferError;
use crate::kernels::KernelError;
use crate::pool::{MoveError, PoolError, ResidencyError};

/// A failed benchmark. A wrong kernel result is [`BenchError::Verification`]; nothing is
/// timed after it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A kernel produced a result that differs from the CPU reference.
    #[error("VERIFICATION FAILED: {kernel} on {placement} operands: {source}")]
    Verification {
        /// `name_dtype` of the kernel.
        kernel: String,
        /// The placement (`raw`, `pool`, ...).
        placement: String,
        /// What differed, at which element.
        #[source]
        source: MismatchError,
    },
    /// The benchmark's settings cannot work on this device.
    #[error("{0}")]
    Config(String),
    /// A buffer could not be created.
    #[error("could not allocate a {what}: {source}")]
    Allocation {
        /// What was being allocated.
        what: String,
        /// wgpu's error.
        #[source]
        source: CaughtError,
    },
    /// The pool behind the `pool` and `host` placements could not be created.
    #[error("the pool of `{conf}`: {source}")]
    Pool {
        /// The pool's configuration, in `WGPOOL_CONF` syntax.
        conf: String,
        /// The pool's error.
        #[source]
        source: Box<PoolError>,
    },
    /// A pool block for an operand could not be allocated.
    #[error("pool block of {size} bytes: {source}")]
    Alloc {
        /// The block's size.
        size: u64,
        /// The pool's error.
        #[source]
        source: Box<AllocError>,
    },
    /// A kernel call was refused or failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// An upload or readback failed.
    #[error(transparent)]
    Transfer(#[from] TransferError),
    /// Moving a pool block between device and host memory failed.
    #[error(transparent)]
    Move(#[from] MoveError),
    /// Declaring a block read-only or discarded was refused.
    #[error("residency: {0}")]
    Residency(#[from] ResidencyError),
    /// Measuring `Pool::offload` and `Pool::prefetch` of one block failed.
    #[error("offload/prefetch: {0}")]
    ResidencyMoves(#[from] ResidencyMovesError),
    /// Waiting for the device failed.
    #[error("waiting for the device: {0}")]
    Wait(#[source] wgpu::PollError),
    /// Timing failed.
    #[error(transparent)]
    Timing(#[from] TimingError),
    /// wgpu reported errors outside any error scope during the run.
    #[error("wgpu reported errors during {during}: {}", errors.join("; "))]
    Uncaptured {
        /// The step during which they were noticed.
        during: String,
        /// The errors.
        errors: Vec<String>,
    },
    /// The device was lost: the figures of the step would describe work that did not run.
    #[error("during {during}: {source}")]
    DeviceLost {
        /// The step during which the loss was noticed.
        during: String,
        /// The loss, as wgpu reported it.
        #[source]
        source: crate::gpu::DeviceLost,
    },
}
