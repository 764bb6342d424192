//! Subcommands of the `wgpool` binary.
//!
//! Exit codes: 0 for success (a reader that closed standard output early included), 2 for
//! the user's input (options, configuration, traces, and requests the device cannot serve),
//! 1 only for internal failures. [`Failure`]'s constructors are the one place that decides
//! which errors are which.

pub mod bench;
pub mod compare;
pub mod info;
pub mod output;
pub mod replay;
pub mod replay_gpu;

use wgpool::engine::AllocError;
use wgpool::gpu::GpuError;
use wgpool::pool::PoolError;

/// A failed command: what to print and the exit code.
pub struct Failure {
    /// The message for standard error; empty for a quiet exit.
    pub message: String,
    pub exit_code: u8,
}

impl Failure {
    /// Bad input from the user (a malformed file or option, a request that cannot be
    /// served): exit code 2.
    pub fn bad_input(message: impl std::fmt::Display) -> Failure {
        Failure {
            message: message.to_string(),
            exit_code: 2,
        }
    }

    /// An internal failure (the device, the system, a bug): exit code 1.
    pub fn internal(message: impl std::fmt::Display) -> Failure {
        Failure {
            message: message.to_string(),
            exit_code: 1,
        }
    }

    /// The reader of a pipe the command writes to (standard output, or an output file such
    /// as `--snapshot /dev/stdout`) closed it: stop at once, print nothing, exit 0, as Unix
    /// tools do when the rest of a pipeline needs no more.
    pub fn pipe_closed() -> Failure {
        Failure {
            message: String::new(),
            exit_code: 0,
        }
    }

    /// A device that could not be opened: bad input where the user's choice of adapter or
    /// environment variable is at fault, internal otherwise. `context` prefixes the message.
    pub fn gpu(error: &GpuError, context: &str) -> Failure {
        let message = with_context(context, error);
        match error {
            GpuError::NoMatchingAdapter { .. } | GpuError::BadEnvironment { .. } => {
                Failure::bad_input(message)
            }
            _ => Failure::internal(message),
        }
    }

    /// A pool that could not be created: bad input where the configuration or the pool's
    /// options cannot be applied to this device (a different configuration works),
    /// internal where the device cannot host a pool or setting up its memory failed.
    pub fn pool(error: &PoolError, context: &str) -> Failure {
        let message = with_context(context, error);
        match error {
            PoolError::Config(_)
            | PoolError::Usage { .. }
            | PoolError::HostOverflowUnsupported
            | PoolError::PageMappingUnavailable { .. } => Failure::bad_input(message),
            _ => Failure::internal(message),
        }
    }

    /// An allocation the pool refused: bad input for a request that cannot be served (zero
    /// bytes, above the largest block, out of memory), internal when the device failed.
    pub fn alloc(error: &AllocError, context: &str) -> Failure {
        let message = with_context(context, error);
        match error {
            AllocError::ZeroSize | AllocError::TooLarge { .. } | AllocError::OutOfMemory(_) => {
                Failure::bad_input(message)
            }
            _ => Failure::internal(message),
        }
    }
}

fn with_context(context: &str, error: &dyn std::fmt::Display) -> String {
    if context.is_empty() {
        error.to_string()
    } else {
        format!("{context}: {error}")
    }
}
