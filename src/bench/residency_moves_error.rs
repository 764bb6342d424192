//! Why measuring offload and prefetch failed.

use thiserror::Error;

use crate::engine::AllocError;
use crate::kernels::KernelError;
use crate::pool::{MoveError, PoolError};

/// Why [`residency_moves::measure`](super::residency_moves::measure) failed. Each variant
/// but [`Verification`](ResidencyMovesError::Verification) keeps the failing call's error
/// as its source and prints its message.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ResidencyMovesError {
    /// The pool could not be created.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The block could not be allocated.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// Filling the block or checksumming it failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// Offloading or prefetching the block failed.
    #[error(transparent)]
    Move(#[from] MoveError),
    /// Waiting for the device failed.
    #[error(transparent)]
    Wait(#[from] wgpu::PollError),
    /// The block's contents changed across offload and prefetch.
    #[error("VERIFICATION FAILED: a block's contents changed across offload and prefetch")]
    Verification,
}
