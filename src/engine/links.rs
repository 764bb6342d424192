//! Which block records are neighbours in their segment, and which are allocated or unmapped,
//! kept apart from the records themselves.
//!
//! A free must know whether the freed block's neighbours are free, and a split must relink
//! the block after it. With tens of thousands of live blocks the records no longer fit the
//! CPU's caches, and loading a neighbour's record to read one flag costs a cache miss. These
//! dense arrays (8 bytes and one bit per record slot) stay cached, so a neighbour's record is
//! loaded only when the neighbour really takes part in a merge.

/// No neighbour: the block is first or last in its segment.
pub(crate) const NONE: u32 = u32::MAX;

/// Bits of a slot's state: allocated, and (in pages mode) unmapped.
const ALLOCATED: u64 = 1;
const UNMAPPED: u64 = 2;
/// Slots per state word: two bits each.
const PER_WORD: u32 = 32;

/// Per record slot: the neighbours in the segment and the block's state: allocated, free, or
/// (in pages mode) unmapped address space. Only free blocks take part in a merge.
#[derive(Debug, Default)]
pub(crate) struct BlockLinks {
    /// `[prev, next]`: the record slots of the blocks just below and just above, or [`NONE`].
    neighbours: Vec<[u32; 2]>,
    /// Two bits per record slot: [`ALLOCATED`] and [`UNMAPPED`].
    state: Vec<u64>,
}

impl BlockLinks {
    /// Makes room for `slots` record slots in all.
    pub fn reserve(&mut self, slots: usize) {
        self.neighbours
            .reserve(slots.saturating_sub(self.neighbours.len()));
        self.state.reserve(
            slots
                .div_ceil(PER_WORD as usize)
                .saturating_sub(self.state.len()),
        );
    }

    /// Adds a slot at the end: no neighbours, not allocated.
    pub fn push(&mut self) {
        let slot = self.neighbours.len();
        self.neighbours.push([NONE, NONE]);
        if slot % PER_WORD as usize == 0 {
            self.state.push(0);
        }
    }

    /// Resets a slot for a new record: no neighbours, free.
    #[inline]
    pub fn reset(&mut self, slot: u32) {
        self.neighbours[slot as usize] = [NONE, NONE];
        self.set_bits(slot, 0);
    }

    #[inline]
    fn bits(&self, slot: u32) -> u64 {
        (self.state[(slot / PER_WORD) as usize] >> (2 * (slot % PER_WORD))) & 3
    }

    #[inline]
    fn set_bits(&mut self, slot: u32, bits: u64) {
        let word = &mut self.state[(slot / PER_WORD) as usize];
        let shift = 2 * (slot % PER_WORD);
        *word = (*word & !(3 << shift)) | (bits << shift);
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
        self.bits(slot) & ALLOCATED != 0
    }

    /// Whether the block is address space with no memory behind it (pages mode).
    #[inline]
    pub fn is_unmapped(&self, slot: u32) -> bool {
        self.bits(slot) & UNMAPPED != 0
    }

    /// Whether `slot` is a block (not [`NONE`]) that is free and mapped.
    #[inline]
    pub fn is_free_block(&self, slot: u32) -> bool {
        slot != NONE && self.bits(slot) == 0
    }

    /// Whether `slot` is a block (not [`NONE`]) of unmapped address space.
    #[inline]
    pub fn is_unmapped_block(&self, slot: u32) -> bool {
        slot != NONE && self.is_unmapped(slot)
    }

    /// Marks a block allocated or free (and mapped either way).
    #[inline]
    pub fn set_allocated(&mut self, slot: u32, allocated: bool) {
        self.set_bits(slot, if allocated { ALLOCATED } else { 0 });
    }

    /// Marks a free block unmapped, or mapped again.
    #[inline]
    pub fn set_unmapped(&mut self, slot: u32, unmapped: bool) {
        self.set_bits(slot, if unmapped { UNMAPPED } else { 0 });
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
        links.set_unmapped(65, true);
        assert!(links.is_unmapped_block(65) && !links.is_free_block(65));
        assert!(!links.is_allocated(65) && !links.is_unmapped(64) && !links.is_unmapped(66));
        links.set_unmapped(65, false);
        assert!(links.is_free_block(65) && !links.is_unmapped_block(65));
    }
}
