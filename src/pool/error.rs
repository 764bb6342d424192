//! Errors of the wgpu pool beyond the engine's allocation errors.

use thiserror::Error;

use crate::engine::EngineError;
use crate::engine::SourceError;
use crate::format::bytes;
use crate::gpu::DeviceLost;
use crate::gpu::scope::CaughtError;
use crate::gpu::sparse::NoPageMapping;
use crate::gpu::transfer::TransferError;

/// Why a pool could not be created.
#[derive(Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The configuration cannot be applied to this device.
    #[error("cannot apply WGPOOL_CONF to this device: {0}")]
    Config(#[source] EngineError),
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
    /// `overflow:host` on a device that cannot bind host memory.
    #[error(
        "overflow:host serves blocks from host memory that kernels bind in place, which needs \
         the device feature MAPPABLE_PRIMARY_BUFFERS, and this device was created without it; \
         request it in DeviceDescriptor::required_features where the adapter supports it \
         (GpuContext::headless does), or use overflow:none and Pool::offload / Pool::prefetch"
    )]
    HostOverflowUnsupported,
    /// `expandable_segments:True` on a device that cannot map pages.
    #[error(
        "expandable_segments:True needs a device that can map pages (Vulkan sparse binding), \
         and this one cannot: {reason}. Open the device with wgpool::gpu::sparse::request_device \
         (GpuContext::headless does), or use expandable_segments:auto to fall back to fixed \
         segments"
    )]
    PageMappingUnavailable {
        /// Why the device cannot map pages.
        reason: String,
    },
    /// The device can map pages, but setting up its pages-mode memory failed.
    #[error("pages-mode memory could not be set up: {source}")]
    PageMapping {
        /// What failed, as the page-mapping layer says it.
        #[source]
        source: NoPageMapping,
    },
    /// Residency was asked for ([`PoolOptions::with_residency`](super::PoolOptions::with_residency))
    /// where the pool cannot keep it.
    #[error("residency is unavailable: {reason}")]
    ResidencyUnavailable {
        /// Why, and what to do instead.
        reason: String,
    },
}

/// Why a block cannot be bound.
#[derive(Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum BindingError {
    /// A read-write binding of a block declared read-only
    /// ([`Pool::set_read_only`](super::Pool::set_read_only)).
    #[error(
        "the block is declared read-only (Pool::set_read_only), so it cannot be bound \
         read-write: bind it with `read`, or take the declaration back first"
    )]
    ReadOnlyBlock,
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
    /// A window of zero bytes: wgpu reads a binding without a size as "to the end of the
    /// buffer", which would reach past the block.
    #[error(
        "binding range at {offset} has size 0; a binding must cover at least one byte of the \
         block (wgpu would read a missing size as \"to the end of the buffer\")"
    )]
    Empty {
        /// Window start within the block.
        offset: u64,
    },
    /// The block is offloaded to host memory that kernels cannot bind on this device.
    #[error(
        "the block was moved to host memory by Pool::offload, and this device was created \
         without MAPPABLE_PRIMARY_BUFFERS, so kernels cannot bind host memory; move it back \
         with Pool::prefetch before binding it"
    )]
    Offloaded,
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
    /// A read-only (or uniform) binding and a read-write binding of one group come from the
    /// same pool (or, for plain buffers, the same buffer).
    #[error(
        "binding {read_only} is read-only but comes from the same pool as read-write binding \
         {read_write}; wgpu forbids one buffer being both in one dispatch, and blocks of one \
         pool may share a buffer wherever the pool placed them, so the pool refuses the pair \
         in every memory mode. Declare binding {read_only} `var<storage, read_write>` in WGSL \
         and add it with BlockBindings::read_write, or allocate it from another pool (blocks \
         of different pools never share a buffer)"
    )]
    ReadOnlyConflict {
        /// The read-only binding number.
        read_only: u32,
        /// The read-write binding in the same buffer.
        read_write: u32,
    },
    /// A block of a pool on another device than the bind group's (or than the group's other
    /// blocks).
    #[error(
        "binding {binding} is a block of a pool on another device; a bind group can only bind \
         blocks of pools on the device it is created on"
    )]
    ForeignDevice {
        /// The binding number.
        binding: u32,
    },
    /// A binding number used twice in one group.
    #[error("binding {binding} is given twice")]
    DuplicateBinding {
        /// The binding number.
        binding: u32,
    },
    /// wgpu refused the layout or bind group.
    #[error("wgpu refused the bind group: {0}")]
    Gpu(#[source] CaughtError),
    /// A block's pool knows its device is lost
    /// ([`PoolOptions::with_error_log`](super::PoolOptions::with_error_log)): wgpu would
    /// make a bind group that no work ever uses.
    #[error(transparent)]
    DeviceLost(#[from] DeviceLost),
    /// The block is evicted and could not be brought back to the device.
    #[error("the block is evicted and could not be made resident: {0}")]
    NotResident(#[source] Box<ResidencyError>),
    /// A block the bind group binds was moved (`Pool::offload` / `Pool::prefetch`) after the
    /// group was built: the group still binds the place the block left, which no longer
    /// holds the block's contents.
    #[error(
        "a block this bind group binds was moved by Pool::offload or Pool::prefetch after the \
         group was built at its generation {generation}: the group binds the memory the block \
         left; build the bind group again from the block"
    )]
    Stale {
        /// The block's generation when the group was built; it has moved since.
        generation: u32,
    },
}

/// Why [`Pool::write`](super::Pool::write) or [`Pool::read`](super::Pool::read) failed.
/// The block is unchanged.
#[derive(Error)]
#[non_exhaustive]
pub enum ReadWriteError {
    /// The block was handed out by another pool (possibly on another device).
    #[error("{}", FOREIGN_BLOCK)]
    ForeignBlock,
    /// More data than the block holds.
    #[error("{len} bytes do not fit a block of {size} bytes")]
    BeyondBlock {
        /// Bytes given.
        len: u64,
        /// The block's size.
        size: u64,
    },
    /// The pool's segments lack a usage the transfer needs.
    #[error(
        "the pool's buffers lack usage {needed}, which {purpose} needs; add it to the pool's \
         usages with PoolOptions::with_usage"
    )]
    MissingUsage {
        /// The usage flag needed.
        needed: &'static str,
        /// What it is needed for.
        purpose: &'static str,
    },
    /// The copy itself failed.
    #[error("the transfer failed: {0}")]
    Transfer(#[source] TransferError),
    /// The block is evicted and could not be brought back to the device.
    #[error("the block is evicted and could not be made resident: {0}")]
    Residency(#[from] ResidencyError),
    /// The device was lost, before the transfer or by the submission that carried it: the
    /// transfer did not happen (see
    /// [`PoolOptions::with_error_log`](super::PoolOptions::with_error_log)).
    #[error(transparent)]
    DeviceLost(#[from] DeviceLost),
}

impl From<TransferError> for ReadWriteError {
    fn from(error: TransferError) -> Self {
        ReadWriteError::Transfer(error)
    }
}

/// The message of a block used with a pool that did not hand it out.
const FOREIGN_BLOCK: &str = "the block belongs to another pool (blocks can only be read, \
     written or moved through the pool that allocated them, which may be on another device)";

/// Why a block could not be moved between device and host memory. The block is unchanged:
/// still where it was, with its contents and generation.
#[derive(Error)]
#[non_exhaustive]
pub enum MoveError {
    /// No memory for the block's new home.
    #[error("cannot move the block: {0}")]
    Alloc(#[from] crate::engine::AllocError),
    /// The block was handed out by another pool.
    #[error("cannot move the block: {}", FOREIGN_BLOCK)]
    ForeignBlock,
    /// The host side of the pool could not be set up.
    #[error("cannot move the block: host memory is unavailable: {0}")]
    HostTier(#[source] PoolError),
    /// The device refused the copy.
    #[error("cannot move the block: the copy failed: {0}")]
    Copy(#[source] CaughtError),
    /// Reading the block out of host memory, or writing it to the device, failed.
    #[error("cannot move the block: the transfer failed: {0}")]
    Transfer(#[source] TransferError),
    /// The block is evicted and could not be brought back to the device to be moved.
    #[error("cannot move the block: it is evicted and could not be made resident: {0}")]
    Residency(#[from] ResidencyError),
    /// The device was lost: the block was not moved.
    #[error("cannot move the block: {0}")]
    DeviceLost(#[from] DeviceLost),
}

/// Why a block could not be made resident, evicted or pinned. Nothing is lost: an evicted
/// block keeps its host copy, a resident one its pages.
#[derive(Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ResidencyError {
    /// The block was handed out by another pool.
    #[error("{}", FOREIGN_BLOCK)]
    ForeignBlock,
    /// The device was lost: nothing was made resident or submitted.
    #[error(transparent)]
    DeviceLost(#[from] DeviceLost),
    /// The pool does not page blocks to host memory.
    #[error(
        "the pool was created without residency (PoolOptions::with_residency), so it neither \
         evicts nor pins blocks"
    )]
    Disabled,
    /// The block is smaller than a page (nothing to evict), or was freed.
    #[error(
        "the block has no whole page of its own, so it always stays on the device and cannot \
         be evicted"
    )]
    NotTracked,
    /// The block is pinned, or recorded commands not yet submitted may use it.
    #[error(
        "the block is in use: it is pinned, or commands recorded with it are not submitted yet \
         (submit them through Pool::submit, or call Pool::mark_submitted)"
    )]
    InUse,
    /// The block is declared read-only ([`Pool::set_read_only`](super::Pool::set_read_only)).
    #[error(
        "the block is declared read-only (Pool::set_read_only), so the pool does not write it; \
         take the declaration back first"
    )]
    ReadOnly,
    /// The device budget has no room, even after evicting every block that may go.
    #[error("the device budget of {} has no room: {shortfall}", bytes(*budget))]
    NoRoom {
        /// The device budget.
        budget: u64,
        /// What could not be evicted, and why.
        shortfall: crate::engine::RoomShortfall,
    },
    /// The host limit is reached: the block could not be evicted.
    #[error(
        "evicting {} to host memory would pass the host limit{}; the block stays on the \
         device. Raise the limit (ResidencyOptions::with_host_limit) or free blocks",
        bytes(*needed),
        limit.map(|l| format!(" of {}", bytes(l))).unwrap_or_default()
    )]
    HostLimit {
        /// The bytes the host copy needed.
        needed: u64,
        /// The host limit, if any (none: the host itself refused).
        limit: Option<u64>,
    },
    /// The host tier refused a copy for another reason.
    #[error("host memory refused the copy: {0}")]
    HostAlloc(#[source] crate::engine::AllocError),
    /// The host side of the pool could not be set up.
    #[error("host memory is unavailable: {0}")]
    HostTier(#[source] PoolError),
    /// The device refused a copy.
    #[error("the copy between device and host memory failed: {0}")]
    Copy(#[source] CaughtError),
    /// Mapping or unmapping the block's pages failed.
    #[error("{0}")]
    Pages(#[source] crate::engine::EvictError),
}

crate::error_debug::debug_as_message!(
    PoolError,
    BindingError,
    ReadWriteError,
    MoveError,
    ResidencyError
);

/// An allocation on a lost device fails as a source failure of kind
/// [`DeviceLost`](crate::engine::SourceErrorKind::DeviceLost).
impl From<DeviceLost> for crate::engine::AllocError {
    fn from(lost: DeviceLost) -> Self {
        crate::engine::AllocError::Source(SourceError::device_lost(lost))
    }
}
