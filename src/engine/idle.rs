//! The segments that hold a single free block, least recently idle first.
//!
//! A segment joins at the back when its last allocated block is freed, and leaves when a
//! request takes its block or the segment is released. Segments join in the order of the
//! engine's clock, so the list stays in `idle_since` order with no sorting, and both joining
//! and leaving cost O(1): `empty_cache`, garbage collection and the compact policy find the
//! cached segments without looking through every free block.

use super::links::NONE;

/// A doubly linked list over segment slots.
#[derive(Debug, Default)]
pub(crate) struct IdleList {
    first: u32,
    last: u32,
    len: usize,
    /// Per segment slot: `[prev, next]` in the list, or [`NONE`] at the ends.
    links: Vec<[u32; 2]>,
    /// Per segment slot: whether it is in the list.
    member: Vec<bool>,
}

impl IdleList {
    pub fn new() -> IdleList {
        IdleList {
            first: NONE,
            last: NONE,
            ..IdleList::default()
        }
    }

    fn grow_to(&mut self, segment: u32) {
        let needed = segment as usize + 1;
        if self.links.len() < needed {
            self.links.resize(needed, [NONE, NONE]);
            self.member.resize(needed, false);
        }
    }

    /// Appends `segment`, which must not be in the list, as the most recently idle.
    pub fn push_back(&mut self, segment: u32) {
        self.grow_to(segment);
        debug_assert!(
            !self.member[segment as usize],
            "segment {segment} idle twice"
        );
        self.member[segment as usize] = true;
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
        self.member[segment as usize] = false;
        self.len -= 1;
        true
    }

    pub fn contains(&self, segment: u32) -> bool {
        self.member.get(segment as usize).copied().unwrap_or(false)
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
    }
}
