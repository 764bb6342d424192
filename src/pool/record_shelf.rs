//! The record shelf: boxed records of blocks freed to the engine, kept by segment with their
//! buffer handle, so that the next block the engine places in that segment takes one rather
//! than allocate a record and count its buffer's references up (and the old record's down).
//!
//! Guarantees:
//! - it holds at most [`CAPACITY`] records;
//! - a block takes a record of its own segment, whose buffer handle is the block's own (or,
//!   in pages mode, another wrapper of its range, replaced then), so that reusing a record
//!   counts no buffer reference up or down. A record of another segment would save the
//!   block its allocation but not its handle's two references counted down and the new
//!   handle's two up (four locked instructions, about 44 ns on the H100's host, call 48), and
//!   would leave its own segment without a record for the next block there (call 52: on the
//!   decode, 14% of the allocations swapped handles that way, and those four instructions
//!   held 6% of the process's samples). Records left on a segment's shelf serve its later
//!   blocks: in a trace that repeats itself every segment gets back what it gave;
//! - only when the shelf is at least half full (records piled up on segments that no
//!   longer get blocks, after a change of the workload's shapes) does a block without a
//!   record of its own segment take another's, swapping its handle, so that such a pile
//!   costs no more than that swap;
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
    /// The segment a record was last put for: where a block takes one from a crowded shelf.
    last: usize,
}

/// Drops the label and the residency record `record` names.
#[cold]
#[inline(never)]
fn let_go(record: &mut BlockParts) {
    record.label = None;
    record.residence = None;
}

impl RecordShelf {
    /// Keeps `record` (of a device block just freed to the engine) for the next block of its
    /// segment, or drops it when the shelf is full. Host records are dropped: their segments
    /// are another engine's.
    #[inline]
    pub fn put(&mut self, mut record: Box<BlockParts>) {
        if self.held >= CAPACITY || record.residency != Residency::Device {
            return;
        }
        let index = record.segment.0 as usize;
        if index >= self.by_segment.len() {
            self.by_segment.resize_with(index + 1, Vec::new);
        }
        // What a record names besides its buffer is let go now, not when it is reused. Out
        // of line: most records name nothing else, and dropping either needs a call.
        if record.label.is_some() || record.residence.is_some() {
            let_go(&mut record);
        }
        self.by_segment[index].push(record);
        self.last = index;
        self.held += 1;
    }

    /// A record last used in `segment` (most recently put first); from a shelf at least half
    /// full, any record where `segment` has none; else `None`.
    #[inline]
    pub fn take(&mut self, segment: SegmentId) -> Option<Box<BlockParts>> {
        let own = self
            .by_segment
            .get_mut(segment.0 as usize)
            .and_then(Vec::pop);
        let record = match own {
            Some(record) => record,
            None if self.held >= CAPACITY / 2 => self.take_crowded()?,
            None => return None,
        };
        self.held -= 1;
        Some(record)
    }

    /// Any record, for a block whose segment has none while the shelf is crowded: the last
    /// segment's, else the first segment's that has one.
    #[cold]
    fn take_crowded(&mut self) -> Option<Box<BlockParts>> {
        if self.by_segment.get(self.last).is_none_or(Vec::is_empty) {
            self.last = self.by_segment.iter().position(|p| !p.is_empty())?;
        }
        self.by_segment[self.last].pop()
    }

    /// Drops every record.
    pub fn clear(&mut self) {
        self.by_segment.clear();
        self.held = 0;
        self.last = 0;
    }
}
