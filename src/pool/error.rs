//! Errors of the wgpu pool beyond the engine's allocation errors.

use thiserror::Error;

use crate::format::bytes;

/// Why a pool could not be created.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PoolError {
    /// The configuration cannot be applied to this device.
    #[error("cannot apply WGPOOL_CONF to this device: {0}")]
    Config(String),
    /// The device needs offsets aligned more strictly than the 512 B block granule.
    #[error(
        "the device requires buffer offsets aligned to {alignment} bytes, more than the pool's 512 B granule"
    )]
    Alignment {
        /// The device's offset alignment.
        alignment: u64,
    },
    /// The usages cannot form a pool.
    #[error("buffer usages {usage:?} cannot form a pool: {reason}")]
    Usage {
        /// The usages asked for.
        usage: wgpu::BufferUsages,
        /// Why not.
        reason: &'static str,
    },
}

/// Why a block cannot be bound as one binding.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BindingError {
    /// The block is larger than the device lets one binding be.
    #[error(
        "block of {} ({size} bytes) exceeds the device's {kind} binding limit of {} ({limit} bytes); \
         bind it in windows of at most {limit} bytes with Block::binding_range, or split the work",
        bytes(*size),
        bytes(*limit)
    )]
    TooLarge {
        /// The bytes that would be bound.
        size: u64,
        /// The limit.
        limit: u64,
        /// `storage` or `uniform`.
        kind: &'static str,
    },
    /// A window outside the block.
    #[error("binding range {offset}+{size} lies outside the block of {capacity} bytes")]
    OutOfRange {
        /// Window start within the block.
        offset: u64,
        /// Window length.
        size: u64,
        /// The block's capacity.
        capacity: u64,
    },
    /// The block is where no binding can reach it.
    #[error("the block cannot be bound: {reason}")]
    NotBindable {
        /// Why, and what to do.
        reason: &'static str,
    },
    /// A window start that the device cannot bind.
    #[error(
        "binding range offset {offset} is not a multiple of the device's offset alignment {alignment}"
    )]
    Misaligned {
        /// Window start within the block.
        offset: u64,
        /// The alignment required.
        alignment: u64,
    },
}

/// Why a block could not be moved between device and host memory. The block is unchanged:
/// still where it was, with its contents and generation.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum MoveError {
    /// No memory for the block's new home.
    #[error("cannot move the block: {0}")]
    Alloc(#[from] crate::engine::AllocError),
    /// The copy failed.
    #[error("cannot move the block: {0}")]
    Copy(String),
}
