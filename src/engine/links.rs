//! Which block records are neighbours in their segment, and which are allocated, kept apart
//! from the records themselves.
//!
//! A free must know whether the freed block's neighbours are free, and a split must relink
//! the block after it. With tens of thousands of live blocks the records no longer fit the
//! CPU's caches, and loading a neighbour's record to read one flag costs a cache miss. These
//! dense arrays (8 bytes and one bit per record slot) stay cached, so a neighbour's record is
//! loaded only when the neighbour really takes part in a merge.

/// No neighbour: the block is first or last in its segment.
pub(crate) const NONE: u32 = u32::MAX;

/// Per record slot: the neighbours in the segment and whether the block is allocated.
#[derive(Debug, Default)]
pub(crate) struct BlockLinks {
    /// `[prev, next]`: the record slots of the blocks just below and just above, or [`NONE`].
    neighbours: Vec<[u32; 2]>,
    /// One bit per record slot, set while the block is allocated.
    allocated: Vec<u64>,
}

impl BlockLinks {
    /// Makes room for `slots` record slots in all.
    pub fn reserve(&mut self, slots: usize) {
        self.neighbours
            .reserve(slots.saturating_sub(self.neighbours.len()));
        self.allocated
            .reserve(slots.div_ceil(64).saturating_sub(self.allocated.len()));
    }

    /// Adds a slot at the end: no neighbours, not allocated.
    pub fn push(&mut self) {
        let slot = self.neighbours.len();
        self.neighbours.push([NONE, NONE]);
        if slot % 64 == 0 {
            self.allocated.push(0);
        }
    }

    /// Resets a slot for a new record: no neighbours, not allocated.
    #[inline]
    pub fn reset(&mut self, slot: u32) {
        self.neighbours[slot as usize] = [NONE, NONE];
        self.set_allocated(slot, false);
    }

    /// The block below `slot` in its segment, or [`NONE`].
    #[inline]
    pub fn prev(&self, slot: u32) -> u32 {
        self.neighbours[slot as usize][0]
    }

    /// The block above `slot` in its segment, or [`NONE`].
    #[inline]
    pub fn next(&self, slot: u32) -> u32 {
        self.neighbours[slot as usize][1]
    }

    #[inline]
    pub fn set_prev(&mut self, slot: u32, prev: u32) {
        self.neighbours[slot as usize][0] = prev;
    }

    #[inline]
    pub fn set_next(&mut self, slot: u32, next: u32) {
        self.neighbours[slot as usize][1] = next;
    }

    /// Whether the block has a neighbour, i.e. does not span its whole segment.
    #[inline]
    pub fn is_split(&self, slot: u32) -> bool {
        self.neighbours[slot as usize] != [NONE, NONE]
    }

    #[inline]
    pub fn is_allocated(&self, slot: u32) -> bool {
        self.allocated[slot as usize / 64] & (1 << (slot % 64)) != 0
    }

    /// Whether `slot` is a block (not [`NONE`]) that is free.
    #[inline]
    pub fn is_free_block(&self, slot: u32) -> bool {
        slot != NONE && !self.is_allocated(slot)
    }

    #[inline]
    pub fn set_allocated(&mut self, slot: u32, allocated: bool) {
        let word = &mut self.allocated[slot as usize / 64];
        let bit = 1u64 << (slot % 64);
        if allocated {
            *word |= bit;
        } else {
            *word &= !bit;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_start_unlinked_and_free_and_keep_their_own_bits() {
        let mut links = BlockLinks::default();
        for _ in 0..130 {
            links.push();
        }
        assert!(!links.is_split(129) && !links.is_allocated(129));
        links.set_allocated(64, true);
        links.set_allocated(127, true);
        assert!(links.is_allocated(64) && links.is_allocated(127));
        assert!(!links.is_allocated(63) && !links.is_allocated(65) && !links.is_allocated(128));
        links.set_next(3, 64);
        links.set_prev(64, 3);
        assert!(links.is_split(3) && links.is_split(64));
        assert_eq!((links.prev(64), links.next(3)), (3, 64));
        assert!(!links.is_free_block(64) && links.is_free_block(3) && !links.is_free_block(NONE));
        links.reset(64);
        assert!(!links.is_allocated(64) && !links.is_split(64) && links.is_allocated(127));
    }
}
