//! A least-recently-idle list over segments: those that hold a single free block.
//!
//! A segment joins at the back when it becomes idle (its last allocated block is freed), and
//! leaves when a request takes it or it is released. Segments join in the order of the
//! engine's clock, so the list stays in idle order with no sorting, and both joining and
//! leaving cost O(1): `empty_cache`, garbage collection and the compact policy find what is
//! idle without looking through every free block. (Pages mode's idle pages are a lazy
//! queue instead: `idle_queue`.)

use super::links::NONE;
use super::rounding::SegmentKind;

/// An idle segment as the engine's rules read it: the free block spanning it and what it
/// last served.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdleSegment {
    /// The free block that spans the segment.
    pub block: u32,
    pub size: u64,
    pub kind: SegmentKind,
    pub stream: u32,
    /// The size of the block whose free left the segment idle.
    pub last_use: u64,
}

/// In a slot's `prev`: the slot is not in the list. (A slot in the list has a real slot or
/// [`NONE`] there; slots are record indexes, far below this.)
const OUT: u32 = NONE - 1;

/// A doubly linked list over slots. Create it with [`IdleList::new`].
#[derive(Debug)]
pub(crate) struct IdleList {
    first: u32,
    last: u32,
    len: usize,
    /// Per slot: `[prev, next]` in the list, [`NONE`] at the ends; `prev` is [`OUT`] for a
    /// slot not in the list, so that one load answers both questions.
    links: Vec<[u32; 2]>,
}

impl IdleList {
    pub fn new() -> IdleList {
        IdleList {
            first: NONE,
            last: NONE,
            len: 0,
            links: Vec::new(),
        }
    }

    #[inline]
    fn grow_to(&mut self, segment: u32) {
        let needed = segment as usize + 1;
        if self.links.len() < needed {
            self.grow_links(needed);
        }
    }

    /// Room for `needed` slots: rare (the list grows with the record slots), kept out of the
    /// inlined paths.
    #[cold]
    #[inline(never)]
    fn grow_links(&mut self, needed: usize) {
        self.links.resize(needed, [OUT, NONE]);
    }

    /// Appends `segment`, which must not be in the list, as the most recently idle.
    #[inline]
    pub fn push_back(&mut self, segment: u32) {
        debug_assert!(segment < OUT);
        self.grow_to(segment);
        debug_assert!(!self.contains(segment), "segment {segment} idle twice");
        self.links[segment as usize] = [self.last, NONE];
        if self.last == NONE {
            self.first = segment;
        } else {
            self.links[self.last as usize][1] = segment;
        }
        self.last = segment;
        self.len += 1;
    }

    /// Takes `segment` out of the list; returns whether it was in it.
    #[inline]
    pub fn remove(&mut self, segment: u32) -> bool {
        if !self.contains(segment) {
            return false;
        }
        let [prev, next] = self.links[segment as usize];
        if prev == NONE {
            self.first = next;
        } else {
            self.links[prev as usize][1] = next;
        }
        if next == NONE {
            self.last = prev;
        } else {
            self.links[next as usize][0] = prev;
        }
        self.links[segment as usize][0] = OUT;
        self.len -= 1;
        true
    }

    #[inline]
    pub fn contains(&self, segment: u32) -> bool {
        self.links
            .get(segment as usize)
            .is_some_and(|&[prev, _]| prev != OUT)
    }

    /// The segments, least recently idle first.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors((self.first != NONE).then_some(self.first), |&s| {
            let next = self.links[s as usize][1];
            (next != NONE).then_some(next)
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_joining_order_through_removals_anywhere() {
        let mut list = IdleList::new();
        assert_eq!(list.iter().count(), 0);
        for s in [5, 2, 9, 0, 7] {
            list.push_back(s);
        }
        assert!(list.remove(9));
        assert!(!list.remove(9), "already gone");
        assert!(!list.remove(100), "never there");
        assert!(list.remove(5));
        list.push_back(5);
        assert!(list.remove(7));
        assert_eq!(list.iter().collect::<Vec<_>>(), [2, 0, 5]);
        assert_eq!(list.len(), 3);
        for s in [2, 0, 5] {
            assert!(list.remove(s));
        }
        assert_eq!((list.len(), list.iter().count()), (0, 0));
        list.push_back(3);
        assert_eq!(list.iter().collect::<Vec<_>>(), [3]);
        list.push_back(8);
        list.push_back(1);
        assert_eq!(list.iter().collect::<Vec<_>>(), [3, 8, 1]);
        assert!(list.contains(8) && !list.contains(20) && list.len() == 3);
    }
}
