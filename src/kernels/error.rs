//! Why a kernel could not be prepared or run.

use crate::gpu::scope::CaughtError;
use crate::gpu::transfer::TransferError;

/// A kernel call that was refused, or failed on the device. Messages name the operand
/// (by its role in the kernel: `a`, `dst`, `result`, ...) and what is allowed.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// An operand is a block of a pool on another device than the kernels'.
    #[error(
        "operand {role} is a block of a pool on another device; kernels run only on blocks of \
         pools on the device they were built for (Kernels::new)"
    )]
    ForeignDevice {
        /// The operand's role.
        role: &'static str,
    },
    /// An operand is an evicted block that could not be brought back to the device, neither
    /// when the operand was taken nor when the kernel checked it.
    #[error("operand {role} is an evicted block that could not be made resident")]
    NotResident {
        /// The operand's role.
        role: &'static str,
        /// Why the pool could not bring it back.
        #[source]
        source: Box<crate::pool::ResidencyError>,
    },
    /// An operand block moved (`Pool::offload`, `Pool::prefetch`) after the kernel was
    /// prepared: its bind groups name the memory the block left.
    #[error(
        "an operand block was moved by Pool::offload or Pool::prefetch after the kernel was \
         prepared: prepare the call again from the block"
    )]
    Stale,
    /// The device lacks a feature the kernel needs.
    #[error("kernel {kernel} needs device features {missing} that this device does not have")]
    Unsupported {
        /// `name_dtype` of the kernel.
        kernel: String,
        /// The missing features.
        missing: String,
    },
    /// The kernel has no variant for the requested element type.
    #[error("kernel {kernel} has no {dtype} variant; allowed: {allowed}")]
    NoSuchDtype {
        /// The kernel's name.
        kernel: &'static str,
        /// The element type asked for.
        dtype: &'static str,
        /// The element types it has.
        allowed: &'static str,
    },
    /// An operand starts at an offset the device cannot bind.
    #[error(
        "operand {role} starts at byte {offset}, which is not a multiple of the device's \
         min_storage_buffer_offset_alignment ({alignment} bytes)"
    )]
    Misaligned {
        /// The operand's role.
        role: &'static str,
        /// Its offset.
        offset: u64,
        /// The required alignment.
        alignment: u64,
    },
    /// An operand's size is not a whole number of 4-byte words.
    #[error("operand {role} is {size} bytes; sizes must be multiples of 4 bytes")]
    BadSize {
        /// The operand's role.
        role: &'static str,
        /// Its size.
        size: u64,
    },
    /// An operand extends past the end of its buffer.
    #[error(
        "operand {role} covers bytes {offset}..{end} but its buffer has only {buffer_size} bytes"
    )]
    OutOfRange {
        /// The operand's role.
        role: &'static str,
        /// Its offset.
        offset: u64,
        /// Its end.
        end: u64,
        /// The buffer's size.
        buffer_size: u64,
    },
    /// An operand's buffer lacks a usage the kernel needs.
    #[error(
        "operand {role} is in a buffer without {needed} usage; create the buffer with {needed}"
    )]
    MissingUsage {
        /// The operand's role.
        role: &'static str,
        /// The usage flags needed.
        needed: &'static str,
    },
    /// The data operands of one call differ in size.
    #[error(
        "operand {role} is {size} bytes but operand {first} is {expected} bytes; all data operands of {kernel} must be the same size"
    )]
    SizeMismatch {
        /// The kernel's name.
        kernel: &'static str,
        /// The first operand's role.
        first: &'static str,
        /// Its size.
        expected: u64,
        /// The mismatching operand's role.
        role: &'static str,
        /// Its size.
        size: u64,
    },
    /// Two operands share bytes in a way that would race.
    #[error("operands {first} and {second} overlap ({detail})")]
    Overlap {
        /// One operand's role.
        first: &'static str,
        /// The other's.
        second: &'static str,
        /// What is allowed.
        detail: &'static str,
    },
    /// The result operand of a reduction is too small.
    #[error("operand result is {size} bytes; a reduction needs at least 4")]
    ResultTooSmall {
        /// Its size.
        size: u64,
    },
    /// An operand under 16 bytes sits in a buffer under 16 bytes.
    #[error(
        "operand {role} is {size} bytes in a buffer of {buffer_size} bytes; operands under 16 bytes need a buffer of at least 16 bytes"
    )]
    TinyBuffer {
        /// The operand's role.
        role: &'static str,
        /// Its size.
        size: u64,
        /// The buffer's size.
        buffer_size: u64,
    },
    /// A [`KernelOptions`](super::KernelOptions) value is out of range.
    #[error("kernel option {name} = {value} is not allowed; allowed: {allowed}")]
    BadOption {
        /// The option.
        name: &'static str,
        /// Its value.
        value: u64,
        /// The allowed range.
        allowed: String,
    },
    /// wgpu reported an error.
    #[error(transparent)]
    Gpu(#[from] CaughtError),
    /// Reading a result back failed.
    #[error(transparent)]
    Transfer(#[from] TransferError),
}

crate::error_debug::debug_as_message!(KernelError);
