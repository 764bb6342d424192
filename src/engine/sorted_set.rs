//! An ordered set kept as a sorted vector while it is small and as a B-tree once it is
//! large: each size class of the free index, and the unmapped blocks of pages mode.
//!
//! Most size classes hold a handful of blocks, and many swing between none and one on every
//! split and merge; unmapped blocks are a few dozen. A B-tree pays a node allocation to go from none to one and a release to
//! go back, and walks nodes on every change; a sorted vector keeps its buffer and needs one
//! binary search and a short move. A class that grows past [`TO_TREE`] keys (thousands of
//! free blocks of nearly one size) becomes a B-tree, so that no change ever moves more
//! than that many keys, and goes back to a vector below [`TO_VEC`].
//!
//! Guarantees: the set holds each key at most once, and every walk yields keys in
//! ascending (or, backwards, descending) order, whichever form the set has.

use std::collections::BTreeSet;
use std::collections::btree_set;
use std::slice;

/// A sorted vector of this many keys becomes a B-tree.
const TO_TREE: usize = 256;
/// A B-tree of this many keys becomes a sorted vector again.
const TO_VEC: usize = 64;

/// An ordered set of keys.
#[derive(Debug)]
pub(crate) enum SortedSet<T> {
    /// Ascending, no duplicates, at most [`TO_TREE`] keys.
    Sorted(Vec<T>),
    Tree(BTreeSet<T>),
}

impl<T> Default for SortedSet<T> {
    fn default() -> Self {
        SortedSet::Sorted(Vec::new())
    }
}

impl<T: Ord + Copy> SortedSet<T> {
    /// Adds `key`; returns whether it was not there.
    #[inline]
    pub fn insert(&mut self, key: T) -> bool {
        match self {
            SortedSet::Sorted(keys) => {
                let at = keys.partition_point(|&k| k < key);
                if keys.get(at) == Some(&key) {
                    return false;
                }
                keys.insert(at, key);
                if keys.len() > TO_TREE {
                    self.become_tree();
                }
                true
            }
            SortedSet::Tree(tree) => tree.insert(key),
        }
    }

    /// Takes `key` out; returns whether it was there.
    #[inline]
    pub fn remove(&mut self, key: T) -> bool {
        match self {
            SortedSet::Sorted(keys) => match keys.binary_search(&key) {
                Ok(at) => {
                    keys.remove(at);
                    true
                }
                Err(_) => false,
            },
            SortedSet::Tree(tree) => {
                let removed = tree.remove(&key);
                if tree.len() < TO_VEC {
                    self.become_sorted();
                }
                removed
            }
        }
    }

    /// Takes `old` out and adds `new` (not in the set); returns whether `old` was there.
    /// A sorted vector is searched for `old` and, unless `new` sorts between `old`'s
    /// neighbours (a key that changed a little, as an unmapped block cut to its rest usually
    /// does), for `new`; only the keys between the two places move, by one.
    #[inline]
    pub fn replace(&mut self, old: T, new: T) -> bool {
        let SortedSet::Sorted(keys) = self else {
            let removed = self.remove(old);
            let inserted = self.insert(new);
            debug_assert!(inserted, "replacement already in the set");
            return removed;
        };
        let Ok(at) = keys.binary_search(&old) else {
            let inserted = self.insert(new);
            debug_assert!(inserted, "replacement already in the set");
            return false;
        };
        if (at == 0 || keys[at - 1] < new) && keys.get(at + 1).is_none_or(|&above| new < above) {
            keys[at] = new;
            return true;
        }
        let to = keys.partition_point(|&k| k < new);
        debug_assert!(keys.get(to) != Some(&new), "replacement already in the set");
        if to > at {
            keys.copy_within(at + 1..to, at);
            keys[to - 1] = new;
        } else {
            keys.copy_within(to..at, to + 1);
            keys[to] = new;
        }
        true
    }

    #[cold]
    #[inline(never)]
    fn become_tree(&mut self) {
        if let SortedSet::Sorted(keys) = self {
            *self = SortedSet::Tree(keys.iter().copied().collect());
        }
    }

    #[cold]
    #[inline(never)]
    fn become_sorted(&mut self) {
        if let SortedSet::Tree(tree) = self {
            *self = SortedSet::Sorted(tree.iter().copied().collect());
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        match self {
            SortedSet::Sorted(keys) => keys.is_empty(),
            SortedSet::Tree(tree) => tree.is_empty(),
        }
    }

    /// The smallest key.
    #[inline]
    pub fn first(&self) -> Option<T> {
        match self {
            SortedSet::Sorted(keys) => keys.first().copied(),
            SortedSet::Tree(tree) => tree.first().copied(),
        }
    }

    /// The smallest key at or above `bound`.
    #[inline]
    pub fn first_from(&self, bound: T) -> Option<T> {
        match self {
            SortedSet::Sorted(keys) => {
                let at = keys.partition_point(|&k| k < bound);
                keys.get(at).copied()
            }
            SortedSet::Tree(tree) => tree.range(bound..).next().copied(),
        }
    }

    /// [`Self::first_from`], with the key's position for [`Self::after`].
    #[inline]
    pub fn first_from_at(&self, bound: T) -> Option<(T, usize)> {
        match self {
            SortedSet::Sorted(keys) => {
                let at = keys.partition_point(|&k| k < bound);
                keys.get(at).map(|&k| (k, at))
            }
            SortedSet::Tree(tree) => tree.range(bound..).next().map(|&k| (k, 0)),
        }
    }

    /// [`Self::first`], with the key's position for [`Self::after`].
    #[inline]
    pub fn first_at(&self) -> Option<(T, usize)> {
        self.first().map(|k| (k, 0))
    }

    /// The smallest key above `key`, with its position, where `at` is the position of `key`
    /// as [`Self::first_from_at`], [`Self::first_at`] or this method gave it, the set
    /// unchanged since. A step in the vector form, a search in the tree form (where
    /// positions are not kept); either way the key above `key`. Always inline: the best
    /// fit's walk takes this step on a large share of allocations.
    #[inline(always)]
    pub fn after(&self, key: T, at: usize) -> Option<(T, usize)> {
        match self {
            SortedSet::Sorted(keys) => {
                debug_assert!(keys.get(at) == Some(&key), "a stale position");
                keys.get(at + 1).map(|&k| (k, at + 1))
            }
            SortedSet::Tree(tree) => {
                use std::ops::Bound::{Excluded, Unbounded};
                tree.range((Excluded(key), Unbounded))
                    .next()
                    .map(|&k| (k, 0))
            }
        }
    }

    /// Keys at or above `bound`, ascending (walk it forwards).
    #[inline]
    pub fn from(&self, bound: T) -> Keys<'_, T> {
        match self {
            SortedSet::Sorted(keys) => {
                let at = keys.partition_point(|&k| k < bound);
                Keys::Sorted(keys[at..].iter())
            }
            SortedSet::Tree(tree) => Keys::Tree(tree.range(bound..)),
        }
    }

    /// Keys below `bound`, ascending (walk it backwards for descending order).
    #[inline]
    pub fn below(&self, bound: T) -> Keys<'_, T> {
        match self {
            SortedSet::Sorted(keys) => {
                let at = keys.partition_point(|&k| k < bound);
                Keys::Sorted(keys[..at].iter())
            }
            SortedSet::Tree(tree) => Keys::Tree(tree.range(..bound)),
        }
    }

    /// Every key, ascending.
    #[inline]
    pub fn all(&self) -> Keys<'_, T> {
        match self {
            SortedSet::Sorted(keys) => Keys::Sorted(keys.iter()),
            SortedSet::Tree(tree) => Keys::Tree(tree.range(..)),
        }
    }
}

/// A run of a set's keys, walked from either end.
#[derive(Debug, Clone)]
pub(crate) enum Keys<'a, T> {
    Sorted(slice::Iter<'a, T>),
    Tree(btree_set::Range<'a, T>),
}

impl<T> Keys<'_, T> {
    /// No keys.
    pub fn empty() -> Self {
        Keys::Sorted([].iter())
    }
}

impl<T: Copy> Iterator for Keys<'_, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            Keys::Sorted(keys) => keys.next().copied(),
            Keys::Tree(keys) => keys.next().copied(),
        }
    }
}

impl<T: Copy> DoubleEndedIterator for Keys<'_, T> {
    #[inline]
    fn next_back(&mut self) -> Option<T> {
        match self {
            Keys::Sorted(keys) => keys.next_back().copied(),
            Keys::Tree(keys) => keys.next_back().copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_rng::xorshift;

    /// Through growth past the tree threshold and shrinking below the vector one, every
    /// query answers as a `BTreeSet` does.
    #[test]
    fn answers_as_a_btree_set_in_either_form() {
        let mut set = SortedSet::default();
        let mut reference = BTreeSet::new();
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        let mut became_tree = false;
        for round in 0..6000u32 {
            // Grow for the first half, shrink for the second.
            let grow = if round < 3000 { 3 } else { 0 };
            let r = next();
            let key = (r % 1000) as u128;
            if r % 4 < grow {
                assert_eq!(set.insert(key), reference.insert(key));
            } else if r % 8 == 7 {
                // A replacement near the old key (kept in place) or anywhere (moved).
                let new = if r % 16 == 7 {
                    key + 1 + ((r >> 20) % 3) as u128
                } else {
                    ((r >> 20) % 1000) as u128
                };
                // As the engine uses it: the old key is there and the new one is not.
                if reference.contains(&key) && !reference.contains(&new) {
                    reference.remove(&key);
                    reference.insert(new);
                    assert!(set.replace(key, new));
                }
            } else {
                assert_eq!(set.remove(key), reference.remove(&key));
            }
            became_tree |= matches!(set, SortedSet::Tree(_));
            let probe = (next() % 1100) as u128;
            assert_eq!(set.is_empty(), reference.is_empty());
            assert_eq!(set.first(), reference.first().copied());
            assert_eq!(
                set.first_from(probe),
                reference.range(probe..).next().copied()
            );
            let from: Vec<u128> = set.from(probe).take(5).collect();
            let expected: Vec<u128> = reference.range(probe..).take(5).copied().collect();
            assert_eq!(from, expected);
            // Stepping by position yields the same keys.
            let stepped: Vec<u128> =
                std::iter::successors(set.first_from_at(probe), |&(k, at)| set.after(k, at))
                    .map(|(k, _)| k)
                    .take(5)
                    .collect();
            assert_eq!(stepped, expected);
            assert_eq!(set.first_at().map(|(k, _)| k), set.first());
            let below: Vec<u128> = set.below(probe).rev().take(5).collect();
            let expected: Vec<u128> = reference.range(..probe).rev().take(5).copied().collect();
            assert_eq!(below, expected);
        }
        assert!(became_tree, "the test never reached the tree form");
        assert!(matches!(set, SortedSet::Sorted(_)), "it never went back");
        assert!(set.all().eq(reference.iter().copied()));
    }
}
