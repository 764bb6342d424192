//! The record shelf: boxed records of blocks freed to the engine, kept by segment with their
//! buffer handle, so that the next block the engine places in that segment takes one rather
//! than allocate a record and count its buffer's references up (and the old record's down).
//!
//! Guarantees:
//! - it holds at most [`CAPACITY`] records;
//! - a block takes a record of its own segment where there is one, else any record (whose
//!   buffer handle it then replaces), so that blocks freed in one segment and placed in
//!   another still allocate no record;
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
    /// The segment a record was last put for: where a block of a segment without records
    /// takes one.
    last: usize,
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
        self.last = index;
        self.held += 1;
    }

    /// A record last used in `segment` (most recently put first), else any record; `None`
    /// when the shelf is empty.
    #[inline]
    pub fn take(&mut self, segment: SegmentId) -> Option<Box<BlockParts>> {
        if self.held == 0 {
            return None;
        }
        let own = segment.0 as usize;
        let index = if self.by_segment.get(own).is_some_and(|p| !p.is_empty()) {
            own
        } else if !self.by_segment[self.last].is_empty() {
            self.last
        } else {
            // Rare: the last segment's records were taken; `held > 0`, so one has some.
            let found = self.by_segment.iter().position(|p| !p.is_empty())?;
            self.last = found;
            found
        };
        let record = self.by_segment[index].pop()?;
        self.held -= 1;
        Some(record)
    }

    /// Drops every record.
    pub fn clear(&mut self) {
        self.by_segment.clear();
        self.held = 0;
        self.last = 0;
    }
}
