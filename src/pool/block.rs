//! `Block`: an RAII handle to a piece of a segment buffer.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use super::BindingError;
use super::Residency;
use super::shared::PoolShared;
use crate::engine::{Allocation, BlockId, SegmentId, SegmentKind};
use crate::kernels::Operand;

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
}

impl BlockParts {
    pub fn new(allocation: Allocation, buffer: wgpu::Buffer, residency: Residency) -> BlockParts {
        BlockParts {
            residency,
            generation: 0,
            id: allocation.block,
            buffer,
            segment: allocation.segment,
            kind: allocation.kind,
            offset: allocation.offset,
            size: allocation.requested,
            capacity: allocation.block_size,
        }
    }
}

/// A block of device memory: the range `offset()..offset() + capacity()` of `buffer()`, of
/// which the caller asked for `size()` bytes.
///
/// Guarantees:
/// - no other live block of any pool overlaps it;
/// - `offset()` is a multiple of 512 B, so it meets every offset alignment wgpu allows;
/// - dropping it returns the memory to the pool at once. Work already submitted that uses the
///   block still sees its data: the pool's next user of this memory can only reach it through
///   later submissions on the same queue, which run after it.
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

    /// The segment buffer that holds the block.
    pub fn buffer(&self) -> &wgpu::Buffer {
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

    /// The segment the block lives in.
    pub fn segment(&self) -> SegmentId {
        self.parts.segment
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

    /// The whole block as one binding: `offset()` and `bound_size()`.
    ///
    /// Fails with [`BindingError::TooLarge`] when the block is larger than the device allows
    /// one binding to be (`max_storage_buffer_binding_size` for storage pools); bind it in
    /// windows with [`binding_range`](Block::binding_range) instead.
    pub fn binding(&self) -> Result<wgpu::BufferBinding<'_>, BindingError> {
        self.binding_range(0, self.bound_size())
    }

    /// A window `start..start + size` of the block as a binding. `start` must be a multiple
    /// of the device's offset alignment and the window must lie inside the block and within
    /// the binding limit.
    pub fn binding_range(
        &self,
        start: u64,
        size: u64,
    ) -> Result<wgpu::BufferBinding<'_>, BindingError> {
        let limits = &self.shared.limits;
        if self.parts.residency == Residency::Host && !self.shared.host_bindable {
            return Err(BindingError::NotBindable {
                reason: "the block is offloaded to host staging memory, and this adapter lacks \
                         MAPPABLE_PRIMARY_BUFFERS, so kernels cannot bind it there; prefetch it first",
            });
        }
        if start
            .checked_add(size)
            .is_none_or(|end| end > self.parts.capacity)
        {
            return Err(BindingError::OutOfRange {
                offset: start,
                size,
                capacity: self.parts.capacity,
            });
        }
        if start % limits.offset_alignment != 0 {
            return Err(BindingError::Misaligned {
                offset: start,
                alignment: limits.offset_alignment,
            });
        }
        if size > limits.binding_limit {
            return Err(BindingError::TooLarge {
                size,
                limit: limits.binding_limit,
                kind: limits.binding_kind,
            });
        }
        Ok(wgpu::BufferBinding {
            buffer: &self.parts.buffer,
            offset: self.parts.offset + start,
            size: std::num::NonZeroU64::new(size),
        })
    }

    /// The block as a buffer slice of `size()` bytes (for vertex, index and copy use).
    pub fn slice(&self) -> wgpu::BufferSlice<'_> {
        self.parts
            .buffer
            .slice(self.parts.offset..self.parts.offset + self.parts.size)
    }

    /// The block as a kernel operand of `bound_size()` bytes. Kernels split operands larger
    /// than the binding limit into windows themselves.
    pub fn operand(&self) -> Operand<'_> {
        Operand::new(&self.parts.buffer, self.parts.offset, self.bound_size())
    }
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("segment", &self.parts.segment.0)
            .field("offset", &self.parts.offset)
            .field("size", &self.parts.size)
            .field("capacity", &self.parts.capacity)
            .finish()
    }
}

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
