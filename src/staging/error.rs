//! Why a staging transfer or a staging buffer operation failed.

use crate::format::bytes;
use crate::gpu::scope::CaughtError;

/// Why a transfer through the [`StagingPool`](super::StagingPool) failed.
///
/// Every variant says what was wrong and what is allowed. Bad input never panics and never
/// leaves the pool in a state later calls trip on: the check happens before anything is
/// copied or submitted.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StagingError {
    /// The block belongs to a pool on another device than the staging pool's.
    #[error(
        "{what}: the block belongs to a pool on another device; a staging pool moves data only \
         to and from blocks of pools on its own device"
    )]
    ForeignDevice {
        /// The operation, for example `upload`.
        what: &'static str,
    },
    /// The destination block is declared read-only
    /// ([`Pool::set_read_only`](crate::pool::Pool::set_read_only)): a write would be lost at
    /// its next eviction.
    #[error(
        "{what}: the block is declared read-only (Pool::set_read_only); take the declaration \
         back before writing it"
    )]
    ReadOnly {
        /// The operation, for example `upload`.
        what: &'static str,
    },
    /// More bytes than the destination holds.
    #[error(
        "{what}: {len} bytes do not fit into {destination} of {} ({capacity} bytes); \
         at most {capacity} bytes are allowed",
        bytes(*capacity)
    )]
    TooLong {
        /// The operation, for example `upload`.
        what: &'static str,
        /// The bytes asked for.
        len: u64,
        /// `the block` or `the staging buffer`.
        destination: &'static str,
        /// How many bytes the destination holds.
        capacity: u64,
    },
    /// A partial transfer whose length is not a multiple of 4 bytes.
    #[error(
        "{what}: {len} bytes into {destination} of {size} bytes: a transfer that stops short of \
         the end must be a multiple of 4 bytes (wgpu copies whole 4-byte words, and the \
         padding would overwrite bytes that follow); transfer exactly {size} bytes, or round \
         the length to {} or {}",
        len / 4 * 4,
        len.div_ceil(4) * 4
    )]
    Unaligned {
        /// The operation.
        what: &'static str,
        /// The length asked for.
        len: u64,
        /// `the block`, `the staging buffer`, ...
        destination: &'static str,
        /// The destination's size.
        size: u64,
    },
    /// A byte range outside a staging buffer.
    #[error(
        "{what}: range {offset}..{end} lies outside the staging buffer of {len} bytes; \
         offset + length may be at most {len}"
    )]
    OutOfRange {
        /// The operation.
        what: &'static str,
        /// Range start.
        offset: u64,
        /// Range end (exclusive).
        end: u64,
        /// The staging buffer's length.
        len: u64,
    },
    /// A download of more bytes than the block holds.
    #[error(
        "{what}: {len} bytes asked for but the block holds only {size}; ask for at most \
         {size} bytes"
    )]
    BeyondBlock {
        /// The operation.
        what: &'static str,
        /// Bytes asked for.
        len: u64,
        /// The block's size.
        size: u64,
    },
    /// A destination slice whose length differs from what the transfer delivers.
    #[error(
        "{what}: the destination slice has {got} bytes but the transfer delivers {expected}; \
         pass a slice of exactly {expected} bytes"
    )]
    LengthMismatch {
        /// The operation.
        what: &'static str,
        /// Bytes the transfer delivers.
        expected: u64,
        /// Bytes the slice has.
        got: u64,
    },
    /// The block's buffer lacks a usage the transfer needs.
    #[error(
        "{what}: the block's buffer has usages {usage:?} but needs {needed}; allocate it from a \
         pool whose usages include {needed}"
    )]
    MissingUsage {
        /// The operation.
        what: &'static str,
        /// The usage flag needed.
        needed: &'static str,
        /// The usages the buffer has.
        usage: wgpu::BufferUsages,
    },
    /// A staging or readback buffer larger than the device allows one buffer to be.
    #[error(
        "a staging buffer of {} ({size} bytes) exceeds the device's max_buffer_size of {} \
         ({limit} bytes); use StagingPool::upload or download, which cut large transfers \
         into chunks",
        bytes(*size),
        bytes(*limit)
    )]
    TooLarge {
        /// The size asked for.
        size: u64,
        /// The device's `max_buffer_size`.
        limit: u64,
    },
    /// A readback buffer was read before anything was downloaded into it.
    #[error("the readback buffer holds no data yet; call StagingPool::download_to_readback first")]
    NothingDownloaded,
    /// An earlier GPU operation on this staging buffer failed; it cannot be used any more.
    #[error("the staging buffer is unusable after an earlier failure: {0}; drop it")]
    Broken(String),
    /// A setting of [`StagingOptions`](super::StagingOptions) is out of range.
    #[error("staging option {name} = {value} is invalid; allowed: {allowed}")]
    Option {
        /// The field's name.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// Creating a staging buffer ran out of memory, even after the cache was emptied.
    #[error(
        "could not create a {kind} staging buffer of {} ({size} bytes): {source}; \
         {} are allocated in staging buffers. Use smaller chunks (StagingOptions::chunk_size), \
         fewer in flight (max_in_flight), or drop StagingBuffers you no longer need",
        bytes(*size),
        bytes(*allocated)
    )]
    OutOfMemory {
        /// `upload` or `download`.
        kind: &'static str,
        /// The buffer size asked for.
        size: u64,
        /// Bytes already in staging buffers.
        allocated: u64,
        /// wgpu's error.
        source: CaughtError,
    },
    /// wgpu rejected a copy, submission or mapping.
    #[error(transparent)]
    Gpu(#[from] CaughtError),
    /// The device was lost: the transfer did not happen, or its data cannot be trusted (see
    /// [`StagingPool::from_context`](super::StagingPool::from_context)).
    #[error(transparent)]
    DeviceLost(#[from] crate::gpu::DeviceLost),
    /// Mapping a staging buffer failed (for example, the device was lost).
    #[error("mapping a staging buffer failed: {0}")]
    Map(String),
    /// Waiting for the device failed.
    #[error("waiting for the device failed: {0}")]
    Poll(String),
}

impl From<wgpu::PollError> for StagingError {
    fn from(error: wgpu::PollError) -> StagingError {
        StagingError::Poll(error.to_string())
    }
}

crate::error_debug::debug_as_message!(StagingError);
