//! Segments: creating one (with its virtual address), releasing one, and renumbering the
//! virtual addresses when they run out.

use super::free_index::{self, FreeIndex};
use super::links::NONE;
use super::records::{SegmentFields, SegmentRecord};
use super::rounding::SegmentKind;
use super::source::{SegmentSource, SourceError};
use super::state::{EngineState, FIRST_BASE};
use super::types::SegmentId;

/// Why no segment was created.
#[derive(Debug)]
pub(crate) enum NoSegment {
    /// It would have taken reserved memory over the cap.
    Cap,
    /// The source refused it.
    Source(SourceError),
}

/// Whether a source's address for a segment of `size` bytes fits the free index: 512 B
/// aligned, and the whole segment below [`free_index::ADDRESS_LIMIT`].
fn is_usable_base(address: u64, size: u64) -> bool {
    address % super::rounding::MIN_BLOCK_SIZE == 0
        && address
            .checked_add(size)
            .is_some_and(|end| end < free_index::ADDRESS_LIMIT)
}

impl EngineState {
    /// Creates a segment of `size` bytes holding one free, unindexed block, or says why not.
    pub fn create_segment(
        &mut self,
        size: u64,
        kind: SegmentKind,
        stream: u32,
        source: &mut dyn SegmentSource,
    ) -> Result<u32, NoSegment> {
        if self
            .cap
            .is_some_and(|cap| self.reserved().saturating_add(size) > cap)
        {
            return Err(NoSegment::Cap);
        }
        let slot = self.take_segment_slot();
        if let Err(error) = source.create_segment(SegmentId(slot), size, kind) {
            self.free_segment_slots.push(slot);
            return Err(NoSegment::Source(error));
        }
        let head = self.install_segment(slot, size, kind, stream, source);
        self.stats.segment.increase(kind, 1);
        self.stats.reserved_bytes.increase(kind, size);
        self.stats.num_device_alloc += 1;
        if self.is_oversize(size) {
            self.stats.oversize_segments.increase(1);
        }
        Ok(head)
    }

    /// A free segment slot: a released one, or a new record at the end.
    pub(super) fn take_segment_slot(&mut self) -> u32 {
        self.free_segment_slots.pop().unwrap_or_else(|| {
            self.segments.push(SegmentRecord {
                size: 0,
                kind: SegmentKind::Small,
                stream: 0,
                base: 0,
                head: NONE,
                in_use: false,
                idle_since: 0,
                last_use: 0,
            });
            (self.segments.len() - 1) as u32
        })
    }

    /// Records a segment (or address range) the source has just created in `slot`: its
    /// address, the source's where it gives a usable one (an oracle replay: where PyTorch
    /// put it), else above every segment so far; and one block spanning it, which it
    /// returns (not yet indexed).
    pub(super) fn install_segment(
        &mut self,
        slot: u32,
        size: u64,
        kind: SegmentKind,
        stream: u32,
        source: &mut dyn SegmentSource,
    ) -> u32 {
        let base = match source.segment_address(SegmentId(slot), size, kind) {
            Some(address) if is_usable_base(address, size) => address,
            _ => self.next_segment_base(size),
        };
        self.segments[slot as usize] = SegmentRecord {
            size,
            kind,
            stream,
            base,
            head: NONE,
            in_use: true,
            idle_since: self.clock,
            last_use: 0,
        };
        let of = SegmentFields {
            segment: slot,
            base,
            stream,
            kind,
        };
        let head = self.new_block_record(of, 0, size);
        self.segments[slot as usize].head = head;
        head
    }

    /// A virtual address for a new segment of `size` bytes, after every live segment's. When
    /// the address space (128 PiB of segments created over the engine's life) runs out, the
    /// live segments are renumbered from the start, keeping their order.
    pub(super) fn next_segment_base(&mut self, size: u64) -> u64 {
        if self.next_base + size >= free_index::ADDRESS_LIMIT {
            self.renumber_segments();
        }
        let base = self.next_base;
        self.next_base += size;
        base
    }

    fn renumber_segments(&mut self) {
        let mut live: Vec<u32> = (0..self.segments.len() as u32)
            .filter(|&s| self.segments[s as usize].in_use)
            .collect();
        live.sort_unstable_by_key(|&s| self.segments[s as usize].base);
        let indexed: Vec<u32> = self
            .free_index
            .iter()
            .flat_map(|index| index.iter().map(|k| k.block))
            .collect();
        self.free_index = [FreeIndex::default(), FreeIndex::default()];
        let mut base = FIRST_BASE;
        for s in live {
            self.segments[s as usize].base = base;
            let mut cursor = self.segments[s as usize].head;
            while cursor != NONE {
                self.blocks[cursor as usize].base = base;
                cursor = self.links.next(cursor);
            }
            base += self.segments[s as usize].size;
        }
        self.next_base = base;
        if self.pages_mode {
            self.reindex_unmapped();
        }
        for block in indexed {
            let kind = self.segments[self.blocks[block as usize].segment as usize].kind;
            let key = self.key_of(block);
            self.free_index[kind.index()].insert(key);
        }
    }

    /// Releases the segment of a free block that spans its whole segment.
    pub fn release_block(&mut self, block: u32, source: &mut dyn SegmentSource) {
        debug_assert!(!self.is_split(block) && !self.links.is_allocated(block));
        let key = self.key_of(block);
        let segment = self.blocks[block as usize].segment;
        let (size, kind) = {
            let s = &self.segments[segment as usize];
            (s.size, s.kind)
        };
        self.free_index[kind.index()].remove(&key);
        let was_idle = self.idle_segments.remove(segment);
        debug_assert!(was_idle, "segment {segment} released while not idle");
        self.free_block_record(block);
        self.segments[segment as usize].in_use = false;
        self.free_segment_slots.push(segment);
        source.release_segment(SegmentId(segment), size);
        self.stats.segment.decrease(kind, 1);
        self.stats.reserved_bytes.decrease(kind, size);
        self.stats.num_device_free += 1;
        if self.is_oversize(size) {
            self.stats.oversize_segments.decrease(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::engine::{Engine, EngineLimits, VirtualSegments};

    #[test]
    fn running_out_of_virtual_addresses_renumbers_segments() {
        let mut engine = Engine::new(
            Config::parse("policy:pytorch").unwrap(),
            EngineLimits::unlimited(),
        )
        .unwrap();
        let mut device = VirtualSegments::unlimited();
        let a = engine.allocate(3 << 20, 0, &mut device).unwrap();
        let b = engine.allocate(30 << 20, 0, &mut device).unwrap();
        engine.free(a.block, &mut device).unwrap();
        engine.state.next_base = free_index::ADDRESS_LIMIT - (1 << 20);
        let c = engine.allocate(64 << 20, 0, &mut device).unwrap();
        engine.check_invariants().unwrap();
        assert!(
            engine.state.next_base < FIRST_BASE + (200 << 20),
            "segments were renumbered"
        );
        // The cached block is still found, by its renumbered key.
        let d = engine.allocate(3 << 20, 0, &mut device).unwrap();
        assert_eq!((d.segment, d.offset), (a.segment, a.offset));
        for id in [b.block, c.block, d.block] {
            engine.free(id, &mut device).unwrap();
        }
        engine.check_invariants().unwrap();
    }
}
