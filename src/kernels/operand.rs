//! A kernel operand: a byte range of a buffer, or of a pool block.

use crate::pool::Block;

/// A byte range `offset..offset + size` of a buffer that a kernel reads or writes.
///
/// Pool blocks are operands at non-zero offsets inside shared segment buffers
/// ([`Block::operand`]). For a kernel: `offset` must be a multiple of the device's
/// `min_storage_buffer_offset_alignment`, `size` a multiple of 4 bytes, the range must lie
/// inside the buffer, and the buffer needs `STORAGE` usage. Operands larger than the device's
/// storage binding limit are fine: the kernel is split into several dispatches.
///
/// An operand made from a block remembers it: kernels then check that the block's pool is on
/// their device, and a [`PreparedKernel`](super::PreparedKernel) keeps the block's memory
/// (a [`BlockRef`](crate::pool::BlockRef)) for as long as it can be recorded.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    /// The buffer holding the operand.
    pub buffer: &'a wgpu::Buffer,
    /// Start of the operand within the buffer, in bytes.
    pub offset: u64,
    /// Length of the operand, in bytes.
    pub size: u64,
    /// The block the operand was made from, if any.
    pub(crate) block: Option<&'a Block>,
}

impl Block {
    /// The block as a kernel operand of `bound_size()` bytes. Kernels split operands larger
    /// than the binding limit into windows themselves.
    ///
    /// Counts as exposing the block (see [`FreeTiming`](crate::pool::FreeTiming)).
    pub fn operand(&self) -> Operand<'_> {
        self.expose();
        let (buffer, offset) = self.exposed_place();
        Operand {
            buffer,
            offset,
            size: self.bound_size(),
            block: Some(self),
        }
    }
}

impl<'a> Operand<'a> {
    /// The range `offset..offset + size` of `buffer`.
    pub fn new(buffer: &'a wgpu::Buffer, offset: u64, size: u64) -> Operand<'a> {
        Operand {
            buffer,
            offset,
            size,
            block: None,
        }
    }

    /// The block the operand was made from, if it was made by [`Block::operand`].
    pub fn block(&self) -> Option<&'a Block> {
        self.block
    }

    /// The whole buffer.
    pub fn whole(buffer: &'a wgpu::Buffer) -> Operand<'a> {
        Operand::new(buffer, 0, buffer.size())
    }

    /// One past the last byte (saturating).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }

    /// Whether both operands live in the same buffer.
    pub fn same_buffer(&self, other: &Operand<'_>) -> bool {
        self.buffer == other.buffer
    }

    /// Whether the two operands share at least one byte.
    pub fn overlaps(&self, other: &Operand<'_>) -> bool {
        self.same_buffer(other)
            && self.size > 0
            && other.size > 0
            && self.offset < other.end()
            && other.offset < self.end()
    }

    /// Whether the two operands are exactly the same range of the same buffer.
    pub fn same_range(&self, other: &Operand<'_>) -> bool {
        self.same_buffer(other) && self.offset == other.offset && self.size == other.size
    }
}
