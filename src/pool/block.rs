//! `Block`: an RAII handle to a piece of a segment buffer.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::Residency;
use super::block_ref::SharedPlace;
use super::error::{BindingError, ResidencyError};
use super::pool_shared::{BindingLimits, PoolShared};
use super::recordings::ExposureSpan;
use super::residence::Residence;
use super::reuse_cache::Reusable;
use crate::engine::{Allocation, BlockId, SegmentId, SegmentKind};

/// Where a block is; everything of a [`Block`] but the pool handle.
pub(crate) struct BlockParts {
    pub id: BlockId,
    pub buffer: wgpu::Buffer,
    pub segment: SegmentId,
    pub kind: SegmentKind,
    pub offset: u64,
    pub size: u64,
    pub capacity: u64,
    pub residency: Residency,
    /// Counts the moves between device and host memory.
    pub generation: u32,
    /// The label given at allocation ([`Pool::alloc_labeled`](super::Pool::alloc_labeled)).
    pub label: Option<Arc<str>>,
    /// The recordings that exposed the block (took a binding, operand, slice or buffer)
    /// since it was handed out.
    pub exposure: ExposureSpan,
    /// The place shared with [`BlockRef`](super::BlockRef)s, made by the first one.
    pub share: OnceLock<Arc<SharedPlace>>,
    /// Which of its range's wrappers `buffer` is (pages mode; 0 otherwise).
    pub wrapper: u32,
    /// What GPU work may have reached the block's bytes since the engine handed them out
    /// ([`EXPOSED`], [`TRANSFERRED`]); kept across reuse-cache handouts, which never leave
    /// the bytes.
    pub gpu_work: AtomicU8,
    /// In pages mode, the work clock value of unsettled work of an earlier occupant of these
    /// bytes that the block took over with their wrapper (0 for none); see the `wrappers`
    /// module.
    pub inherited_work: AtomicU64,
    /// In a pool with residency, the block's record there, if it may be evicted.
    pub residence: Option<Arc<Residence>>,
}

/// The bits of [`BlockParts::gpu_work`], defined with the work clock that reads them.
pub(crate) use crate::memory::{EXPOSED, TRANSFERRED};

impl BlockParts {
    pub fn new(allocation: Allocation, buffer: wgpu::Buffer, residency: Residency) -> BlockParts {
        BlockParts {
            residency,
            generation: 0,
            exposure: ExposureSpan::default(),
            share: OnceLock::new(),
            gpu_work: AtomicU8::new(0),
            inherited_work: AtomicU64::new(0),
            residence: None,
            wrapper: 0,
            label: None,
            id: allocation.block,
            buffer,
            segment: allocation.segment,
            kind: allocation.kind,
            offset: allocation.offset,
            size: allocation.requested,
            capacity: allocation.block_size,
        }
    }

    /// Makes this record (of a block freed to the engine) the record of a new block at
    /// `allocation`, as [`new`](Self::new) would make it, keeping the buffer handle where
    /// `buffer` is `None` (the new block is reached through the same buffer): reusing a
    /// record this way saves allocating one, and keeping the handle saves counting the
    /// buffer's references down and up again.
    pub fn reset(
        &mut self,
        allocation: Allocation,
        buffer: Option<wgpu::Buffer>,
        residency: Residency,
    ) {
        // Every field named, so that a new one cannot be forgotten here.
        let BlockParts {
            id,
            buffer: old_buffer,
            segment,
            kind,
            offset,
            size,
            capacity,
            residency: old_residency,
            generation,
            label,
            exposure,
            share,
            wrapper,
            gpu_work,
            inherited_work,
            residence,
        } = self;
        *id = allocation.block;
        if let Some(buffer) = buffer {
            *old_buffer = buffer;
        }
        *segment = allocation.segment;
        *kind = allocation.kind;
        *offset = allocation.offset;
        *size = allocation.requested;
        *capacity = allocation.block_size;
        *old_residency = residency;
        *generation = 0;
        *label = None;
        exposure.clear();
        *share = OnceLock::new();
        *wrapper = 0;
        *gpu_work.get_mut() = 0;
        *inherited_work.get_mut() = 0;
        *residence = None;
    }
}

impl Reusable for BlockParts {
    fn requested(&self) -> u64 {
        self.size
    }

    fn block_size(&self) -> u64 {
        self.capacity
    }

    fn kind(&self) -> SegmentKind {
        self.kind
    }
}

/// A block of device memory: the range `offset()..offset() + capacity()` of `buffer()`, of
/// which the caller asked for `size()` bytes.
///
/// Guarantees:
/// - no other live block of any pool overlaps it;
/// - `offset()` is a multiple of 512 B, so it meets every offset alignment wgpu allows;
/// - dropping it returns the memory to the pool once nothing may still use it: at once for a
///   block never exposed (no binding, operand, slice or buffer taken), else once every
///   recording that exposed it is submitted (see [`FreeTiming`](super::FreeTiming)) and
///   every [`BlockRef`](super::BlockRef) to it (a [`PoolBindGroup`](super::PoolBindGroup)
///   holds one) is gone. Work already submitted that uses the block still sees its data: the
///   pool's next user of this memory can only reach it through later submissions on the same
///   queue, which run after it.
///
/// A block never outlives the memory behind it: it keeps the pool's shared state alive.
pub struct Block {
    shared: ManuallyDrop<Arc<PoolShared>>,
    /// Boxed, so that parking a dropped block in the reuse cache and handing it out again
    /// moves two pointers rather than the whole record.
    parts: ManuallyDrop<Box<BlockParts>>,
}

impl Block {
    #[inline]
    pub(super) fn new(shared: Arc<PoolShared>, parts: Box<BlockParts>) -> Block {
        Block {
            shared: ManuallyDrop::new(shared),
            parts: ManuallyDrop::new(parts),
        }
    }

    /// The buffer the block is reached through: its segment buffer, or in pages mode one
    /// of the wgpu wrappers of its address range (the same Vulkan buffer wrapped several
    /// times, so that dispatches on different blocks need no barrier between them; see
    /// [`DeviceMemoryUsage::wrapper_orderings`](super::DeviceMemoryUsage)). Other blocks may
    /// share it: use [`binding`](Block::binding), [`operand`](Block::operand) or
    /// [`slice`](Block::slice) to reach the block's own bytes. Every access the pool makes
    /// (reads, writes, moves, kernels) goes through this buffer, and the block keeps it for
    /// its life (a move changes it, with the generation).
    ///
    /// In pages mode the pool keeps reuse ordered across wrappers: a new block on freed
    /// bytes takes the wrapper of their previous occupant, or, where the bytes were reached
    /// through several wrappers, the pool first orders all later GPU work after all
    /// submitted work.
    ///
    /// Counts as exposing the block (see [`FreeTiming`](super::FreeTiming)).
    pub fn buffer(&self) -> &wgpu::Buffer {
        self.expose();
        &self.parts.buffer
    }

    /// Byte offset of the block in [`buffer`](Block::buffer).
    pub fn offset(&self) -> u64 {
        self.parts.offset
    }

    /// The bytes the caller asked for.
    pub fn size(&self) -> u64 {
        self.parts.size
    }

    /// The bytes the block really spans: `size()` rounded up by the pool (a multiple of
    /// 512 B). Bytes past `size()` belong to this block and no other.
    pub fn capacity(&self) -> u64 {
        self.parts.capacity
    }

    /// The label the block was allocated with, if any
    /// ([`Pool::alloc_labeled`](super::Pool::alloc_labeled)).
    pub fn label(&self) -> Option<&str> {
        self.parts.label.as_deref()
    }

    /// The segment the block lives in.
    pub fn segment(&self) -> SegmentId {
        self.parts.segment
    }

    /// How many strong references its pool's shared state has: for tests that check that
    /// nothing keeps a pool alive after its last handle and blocks are gone. Not part of
    /// the API.
    #[doc(hidden)]
    pub fn pool_references(&self) -> usize {
        Arc::strong_count(&self.shared)
    }

    /// Whether the block is in device or host memory.
    pub fn residency(&self) -> Residency {
        self.parts.residency
    }

    /// Starts at 0 and grows by one each time [`Pool::offload`](super::Pool::offload) or
    /// [`Pool::prefetch`](super::Pool::prefetch) moves the block. `buffer()` and `offset()`
    /// change only with it, so bind groups built at an older generation must be rebuilt.
    pub fn generation(&self) -> u32 {
        self.parts.generation
    }

    /// Replaces where the block is, after a move, counts a generation, and returns the old
    /// place for the caller to free.
    pub(super) fn relocate(&mut self, mut parts: BlockParts) -> BlockParts {
        parts.generation = self.parts.generation.wrapping_add(1);
        std::mem::replace(&mut **self.parts, parts)
    }

    /// The pool state the block belongs to.
    pub(super) fn shared(&self) -> &Arc<PoolShared> {
        &self.shared
    }

    /// Everything but the pool handle.
    pub(super) fn parts(&self) -> &BlockParts {
        &self.parts
    }

    /// The engine's id of the block.
    pub fn id(&self) -> BlockId {
        self.parts.id
    }

    /// `size()` rounded up to 4 bytes: the extent bindings and copies use.
    pub fn bound_size(&self) -> u64 {
        self.parts.size.div_ceil(4) * 4
    }

    /// The block as a buffer slice of `size()` bytes (for vertex, index and copy use).
    ///
    /// Counts as exposing the block (see [`FreeTiming`](super::FreeTiming)).
    pub fn slice(&self) -> wgpu::BufferSlice<'_> {
        self.expose();
        self.parts
            .buffer
            .slice(self.parts.offset..self.parts.offset + self.parts.size)
    }

    /// Notes that the calling thread may now record commands that name the block's memory:
    /// dropped before that thread's next submission point, it is held back (see
    /// [`FreeTiming`](super::FreeTiming)).
    ///
    /// In a pool with residency, an evicted block is brought back first; where that fails,
    /// the failure is logged (the block stays evicted): use the accessors that return errors
    /// ([`binding`](Block::binding), [`Pool::make_resident`](super::Pool::make_resident)) to
    /// see it.
    #[inline]
    pub(crate) fn expose(&self) {
        if let Err(error) = self.use_resident() {
            log::error!("{}: {error}", self.shared.label);
        }
    }

    /// [`expose`](Block::expose), returning the failure to bring an evicted block back as a
    /// binding error.
    #[inline]
    pub(crate) fn expose_resident(&self) -> Result<(), BindingError> {
        self.use_resident()
            .map_err(|error| BindingError::NotResident(Box::new(error)))
    }

    /// Notes a use of the block by the calling thread's recording and brings it back if it is
    /// evicted, returning why it could not be.
    #[inline]
    pub(crate) fn use_resident(&self) -> Result<(), ResidencyError> {
        self.parts.gpu_work.fetch_or(EXPOSED, Ordering::Relaxed);
        if self.shared.holds_for_recordings() {
            let ticket = self.shared.submissions.recordings.thread_ticket();
            self.parts.exposure.include(ticket);
            if let Some(residence) = &self.parts.residence {
                // Published before the eviction flag is read (see `residence`).
                residence.tickets.include(ticket);
                return self.shared.use_tracked(residence);
            }
        }
        Ok(())
    }

    /// Whether the block is declared read-only in a pool with residency
    /// ([`Pool::set_read_only`](super::Pool::set_read_only)).
    pub(crate) fn is_read_only(&self) -> bool {
        self.parts
            .residence
            .as_ref()
            .is_some_and(|r| r.is_read_only())
    }

    /// Whether the block is evicted (a pool with residency could not bring it back when it
    /// was last used).
    ///
    /// Exact: the flag read without the lock is also set for a moment while another thread's
    /// eviction decides about the block (and backs off, seeing this thread's use), so a set
    /// flag is read again under the pool's lock, which that eviction holds until it is done.
    pub(crate) fn is_evicted(&self) -> bool {
        match &self.parts.residence {
            Some(residence) if residence.evicting() => {
                let _state = self.shared.lock();
                residence.evicting()
            }
            _ => false,
        }
    }

    /// The device of the pool that handed the block out.
    pub fn device(&self) -> &wgpu::Device {
        &self.shared.device
    }

    /// Whether the block's pool is on `device`. Unlike `block.device() == device`, this
    /// tells apart devices of different `wgpu::Instance`s (see
    /// [`same_device`](crate::gpu::same_device)).
    pub fn is_on(&self, device: &wgpu::Device) -> bool {
        self.shared.submissions.key.matches(device)
    }

    /// Whether `self` and `other` come from pools on the same device.
    pub fn same_device(&self, other: &Block) -> bool {
        Arc::ptr_eq(&self.shared.submissions, &other.shared.submissions)
    }

    /// Whether `self` and `other` come from the same pool (or clones of it).
    pub fn same_pool(&self, other: &Block) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The buffer and offset, for the crate's own transfers, which submit at once and so
    /// do not expose the block; noted as a transfer that reached its bytes.
    pub(crate) fn place(&self) -> (&wgpu::Buffer, u64) {
        self.parts.gpu_work.fetch_or(TRANSFERRED, Ordering::Relaxed);
        (&self.parts.buffer, self.parts.offset)
    }

    /// The buffer and offset of a block that was just exposed (a binding or an operand
    /// handed out), whose work is recorded, not submitted by the crate.
    pub(crate) fn exposed_place(&self) -> (&wgpu::Buffer, u64) {
        debug_assert!(self.parts.gpu_work.load(Ordering::Relaxed) & EXPOSED != 0);
        (&self.parts.buffer, self.parts.offset)
    }

    /// The buffer and offset of a block that a bind group will name: noted as GPU work that
    /// may reach its bytes, though no recording uses it yet (the bind group's references
    /// mark the recordings that do).
    pub(crate) fn bound_place(&self) -> (&wgpu::Buffer, u64) {
        self.parts.gpu_work.fetch_or(EXPOSED, Ordering::Relaxed);
        (&self.parts.buffer, self.parts.offset)
    }

    /// The binding limits of the pool the block came from.
    pub(super) fn limits(&self) -> &BindingLimits {
        &self.shared.limits
    }

    /// Whether kernels can bind host memory on the block's device.
    pub(super) fn host_bindable(&self) -> bool {
        self.shared.host_bindable
    }
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("segment", &self.parts.segment.0)
            .field("offset", &self.parts.offset)
            .field("size", &self.parts.size)
            .field("capacity", &self.parts.capacity)
            .field("label", &self.parts.label)
            .finish()
    }
}

#[allow(unsafe_code)]
impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: both fields are taken once, here, and never touched again.
        let (shared, parts) = unsafe {
            (
                ManuallyDrop::take(&mut self.shared),
                ManuallyDrop::take(&mut self.parts),
            )
        };
        PoolShared::release(shared, parts);
    }
}
