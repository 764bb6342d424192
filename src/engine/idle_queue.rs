//! Pages mode's idle pages: the free blocks that hold a whole page, in the order they became
//! idle, as a lazy queue.
//!
//! Blocks join at the back when they become idle and leave, from anywhere, on nearly every
//! allocation and free; the queue is read in order only when a miss recycles pages. So
//! leaving is made as cheap as it can be: a block's entry stays in the queue and only the
//! block's position is forgotten, which makes the entry stale. An entry is live while its
//! block's recorded position is the entry's own, so a block that leaves and joins again
//! (a new position) or whose record slot serves another block never revives an old entry.
//! Stale entries are dropped when they come to outnumber the live ones: each entry is
//! copied at most once per compaction, and a compaction runs only after as many entries
//! went stale as stay live, so the cost per join stays constant.
//!
//! Guarantees: [`IdleQueue::iter`] yields the listed blocks in the order they joined (a
//! block that took another's place by [`IdleQueue::hand_over`] at that place), each once,
//! and [`IdleQueue::len`] counts them.

use super::links::NONE;

/// In a block's position: the block is not listed.
const OUT: u32 = NONE;

/// Stale entries tolerated beyond as many as are live, so that a short queue never compacts.
const SLACK: usize = 64;

/// The idle pages queue. See the [module documentation](self).
#[derive(Debug, Default)]
pub(crate) struct IdleQueue {
    /// Record slots in the order they joined; stale ones among them.
    entries: Vec<u32>,
    /// Per record slot: the index of its live entry, or [`OUT`].
    position: Vec<u32>,
    /// Live entries.
    len: usize,
    /// Every entry before this index is stale. An entry never becomes live again (a block
    /// that joins again gets a new one), so the walks of [`Self::iter`] start here and the
    /// stale entries they passed are not stepped over again, until a compaction renumbers
    /// the entries.
    front: usize,
}

impl IdleQueue {
    /// Whether `slot` is listed.
    #[inline]
    pub fn contains(&self, slot: u32) -> bool {
        self.position
            .get(slot as usize)
            .is_some_and(|&at| at != OUT)
    }

    /// Appends `slot`, which must not be listed, as the most recently idle.
    #[inline]
    pub fn push_back(&mut self, slot: u32) {
        debug_assert!(!self.contains(slot), "slot {slot} listed twice");
        self.tidy();
        if self.position.len() <= slot as usize {
            self.grow(slot);
        }
        self.position[slot as usize] = self.entries.len() as u32;
        self.entries.push(slot);
        self.len += 1;
    }

    /// Takes `slot` out; returns whether it was listed.
    #[inline]
    pub fn remove(&mut self, slot: u32) -> bool {
        match self.position.get_mut(slot as usize) {
            Some(at) if *at != OUT => {
                *at = OUT;
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// Takes `old` out and, if it was listed and `new` (not listed) is to be, puts `new` in
    /// its place: `joins` is asked only when `old` was listed. One lookup of `old` either
    /// way: a split asks this on nearly every allocation.
    #[inline]
    pub fn hand_over(&mut self, old: u32, new: u32, joins: impl FnOnce() -> bool) {
        let Some(slot) = self.position.get_mut(old as usize) else {
            return;
        };
        let at = std::mem::replace(slot, OUT);
        if at == OUT {
            return;
        }
        if !joins() {
            self.len -= 1;
            return;
        }
        debug_assert!(!self.contains(new), "slot {new} listed twice");
        if self.position.len() <= new as usize {
            self.grow(new);
        }
        self.position[new as usize] = at;
        self.entries[at as usize] = new;
    }

    /// Room for a position of `slot`: rare (positions grow with the record slots), kept out
    /// of the inlined paths. Positions at least double, so that record slots made one by
    /// one come here a logarithmic number of times.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, slot: u32) {
        let len = (slot as usize + 1).max(2 * self.position.len());
        self.position.resize(len, OUT);
    }

    /// Drops the stale entries if they outnumber the live ones, so that a walk through the
    /// queue ([`Self::iter`]) costs at most about twice the listed slots.
    #[inline]
    pub fn tidy(&mut self) {
        if self.entries.len() >= 2 * self.len + SLACK {
            self.compact();
        }
    }

    /// Drops the stale entries, keeping the order of the live ones.
    #[cold]
    #[inline(never)]
    fn compact(&mut self) {
        let mut kept = 0;
        for at in 0..self.entries.len() {
            let slot = self.entries[at];
            if self.position[slot as usize] == at as u32 {
                self.position[slot as usize] = kept as u32;
                self.entries[kept] = slot;
                kept += 1;
            }
        }
        self.entries.truncate(kept);
        self.front = 0;
        debug_assert_eq!(kept, self.len);
    }

    /// Whether the entry at `at` is live.
    #[inline]
    fn is_live(&self, at: usize) -> bool {
        self.position[self.entries[at] as usize] == at as u32
    }

    /// Moves the start of the walks past the stale entries at the front (those the last
    /// walk's recycling left, mostly), each stepped over once.
    #[inline]
    pub fn skip_stale_front(&mut self) {
        while self.front < self.entries.len() && !self.is_live(self.front) {
            self.front += 1;
        }
    }

    /// The listed slots, least recently idle first.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (self.front..self.entries.len())
            .filter(|&at| self.is_live(at))
            .map(|at| self.entries[at])
    }

    /// Listed slots.
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_rng::xorshift;

    /// Through removals anywhere, replacements, slots that leave and join again and
    /// compactions, the queue lists what a plain vector in joining order lists.
    #[test]
    fn keeps_joining_order_as_a_vector_does() {
        let mut queue = IdleQueue::default();
        let mut reference: Vec<u32> = Vec::new();
        let mut next = xorshift(0x243f_6a88_85a3_08d3u64);
        for round in 0..20_000 {
            let r = next();
            let slot = (next() % 300) as u32;
            // More joins than leaves early on, the other way round later.
            let joins = if round < 10_000 { 5 } else { 3 };
            if r % 10 < joins {
                if !reference.contains(&slot) {
                    queue.push_back(slot);
                    reference.push(slot);
                }
            } else if r % 10 < 9 {
                let listed = reference.iter().position(|&s| s == slot);
                assert_eq!(queue.remove(slot), listed.is_some());
                if let Some(at) = listed {
                    reference.remove(at);
                }
            } else if !reference.contains(&(slot + 300)) {
                // The new slot joins, or not, in the old one's place.
                let joins = r % 20 < 19;
                let listed = reference.iter().position(|&s| s == slot);
                let mut asked = false;
                queue.hand_over(slot, slot + 300, || {
                    asked = true;
                    joins
                });
                assert_eq!(asked, listed.is_some());
                if let Some(at) = listed {
                    if joins {
                        reference[at] = slot + 300;
                    } else {
                        reference.remove(at);
                    }
                }
            }
            assert_eq!(queue.len(), reference.len());
            assert_eq!(queue.contains(slot), reference.contains(&slot));
            if round % 97 == 0 {
                assert!(queue.iter().eq(reference.iter().copied()));
            }
            // As a recycling walk does: the walks after start past the stale front.
            if round % 13 == 0 {
                queue.skip_stale_front();
                assert!(queue.iter().eq(reference.iter().copied()));
            }
        }
        assert!(queue.iter().eq(reference.iter().copied()));
        assert!(!queue.contains(1_000_000) && !queue.remove(1_000_000));
        queue.hand_over(1_000_000, 1, || unreachable!("not listed"));
    }
}
