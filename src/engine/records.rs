//! The records the engine keeps per segment and per block, packed for the hot paths.

use super::rounding::{MIN_BLOCK_SIZE, SegmentKind};
use super::types::MAX_SEGMENT_SIZE;

#[derive(Debug, Clone)]
pub(crate) struct SegmentRecord {
    pub size: u64,
    pub kind: SegmentKind,
    pub stream: u32,
    /// A virtual address, unique over the engine's life, that orders equal-size free blocks.
    pub base: u64,
    /// First block (lowest offset).
    pub head: u32,
    /// Whether the slot holds a segment.
    pub in_use: bool,
    /// The engine's operation clock when the segment last became wholly free (or was
    /// created).
    pub idle_since: u64,
    /// The size of the block whose free last left the segment wholly free: what the
    /// segment last served (0 until it has been idle once).
    pub last_use: u64,
}

/// What every allocation and free reads of a block, in 40 bytes. The segment's base, kind
/// and stream are copied in, so that neither path reads the segment. The links to the
/// neighbouring blocks and the allocated flag live in [`BlockLinks`].
///
/// With 100k live blocks the records are the largest thing the engine touches, and every
/// free reads one at random: the smaller they are, the more of them stay in the CPU's
/// caches. Sizes and offsets are therefore kept in 512 B granules, in 32 bits, which bounds
/// a segment to [`MAX_SEGMENT_SIZE`].
#[derive(Debug, Clone)]
pub(crate) struct BlockRecord {
    /// The segment's virtual address.
    pub base: u64,
    /// The caller's size, while allocated.
    pub requested: u64,
    pub(super) granules: u32,
    pub(super) offset_granules: u32,
    pub serial: u32,
    pub segment: u32,
    pub stream: u32,
    pub kind: SegmentKind,
    /// Whether the slot holds a block.
    pub in_use: bool,
}

const _: () = assert!(std::mem::size_of::<BlockRecord>() == 40);

impl BlockRecord {
    #[inline]
    pub fn size(&self) -> u64 {
        (self.granules as u64) << 9
    }

    #[inline]
    pub fn set_size(&mut self, size: u64) {
        debug_assert!(size % MIN_BLOCK_SIZE == 0 && size <= MAX_SEGMENT_SIZE);
        self.granules = (size >> 9) as u32;
    }

    /// Offset in the segment.
    #[inline]
    pub fn offset(&self) -> u64 {
        (self.offset_granules as u64) << 9
    }

    /// Moves the block in its segment: for a caller that moves its neighbour's border.
    #[inline]
    pub fn set_offset(&mut self, offset: u64) {
        debug_assert!(offset % MIN_BLOCK_SIZE == 0 && offset <= MAX_SEGMENT_SIZE);
        self.offset_granules = (offset >> 9) as u32;
    }

    /// The virtual address: the segment's base plus the offset.
    #[inline]
    pub fn address(&self) -> u64 {
        self.base + self.offset()
    }

    #[inline]
    pub fn segment_fields(&self) -> SegmentFields {
        SegmentFields {
            segment: self.segment,
            base: self.base,
            stream: self.stream,
            kind: self.kind,
        }
    }
}

/// What a block record copies from its segment's record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentFields {
    pub segment: u32,
    pub base: u64,
    pub stream: u32,
    pub kind: SegmentKind,
}

/// What only garbage collection reads of a block, kept apart from [`BlockRecord`] and
/// written only while garbage collection is active.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BlockCold {
    /// Its segment kind's search counter when the block was last freed (PyTorch's `gc_count_base`).
    pub gc_base: u64,
}
