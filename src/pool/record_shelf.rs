//! The record shelf: boxed records of blocks freed to the engine, kept by segment with their
//! buffer handle, so that the next block the engine places in that segment takes one rather
//! than allocate a record and count its buffer's references up (and the old record's down).
//!
//! Guarantees:
//! - it holds at most [`CAPACITY`] records;
//! - a block takes only a record of its own segment, whose buffer handle is the block's
//!   own (or, in pages mode, another wrapper of its range, replaced then), so that
//!   reusing a record counts no buffer reference up or down. A record of another segment
//!   would save the block its allocation but not the handle's two references counted up and
//!   two down: four locked instructions, about 44 ns on the H100's host (call 48) against
//!   some 20 for the allocation, and it would leave its own segment without a record for
//!   the next block there (call 52: on the decode, 14% of the allocations swapped handles
//!   that way, and those swaps took 6% of the replay's time). Records left on a segment's
//!   shelf serve its later blocks: in a trace that repeats itself every segment gets back
//!   what it gave;
//! - a record on the shelf names no block: its block was freed to the engine before it was
//!   put here, and whoever takes it resets every field (`BlockParts::reset`), replacing the
//!   buffer handle unless it is the new block's own;
//! - it holds device records only, and nothing but buffer handles and boxes: a segment
//!   buffer destroyed while a record names it holds no device memory, and
//!   [`Pool::empty_cache`](super::Pool::empty_cache) empties the shelf.

use super::Residency;
use super::block::BlockParts;
use crate::engine::SegmentId;

/// Most records on the shelf: enough for the frees of a training step's activations
/// between the allocations of the next (about 170 KiB of records).
pub const CAPACITY: usize = 1024;

/// Freed block records by segment.
#[derive(Default)]
pub(crate) struct RecordShelf {
    /// Records by segment id (the engine's segment slots, which are dense). Boxed: a block
    /// owns its record through a box, and the shelf keeps the box itself for the next one.
    #[allow(clippy::vec_box)]
    by_segment: Vec<Vec<Box<BlockParts>>>,
    /// Records on the shelf.
    held: usize,
}

impl RecordShelf {
    /// Keeps `record` (of a device block just freed to the engine) for the next block of its
    /// segment, or drops it when the shelf is full. Host records are dropped: their segments
    /// are another engine's.
    pub fn put(&mut self, mut record: Box<BlockParts>) {
        if self.held >= CAPACITY || record.residency != Residency::Device {
            return;
        }
        let index = record.segment.0 as usize;
        if index >= self.by_segment.len() {
            self.by_segment.resize_with(index + 1, Vec::new);
        }
        // What a record names besides its buffer is let go now, not when it is reused.
        record.label = None;
        record.residence = None;
        self.by_segment[index].push(record);
        self.held += 1;
    }

    /// A record last used in `segment` (most recently put first); `None` when the shelf
    /// has none for it.
    #[inline]
    pub fn take(&mut self, segment: SegmentId) -> Option<Box<BlockParts>> {
        let record = self.by_segment.get_mut(segment.0 as usize)?.pop()?;
        self.held -= 1;
        Some(record)
    }

    /// Drops every record.
    pub fn clear(&mut self) {
        self.by_segment.clear();
        self.held = 0;
    }
}
