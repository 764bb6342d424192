//! The ordered set of free blocks of one pool, searched best-fit by (stream, size, address).

use std::collections::BTreeSet;
use std::ops::Bound;

/// A free block's place in the index. Ordering is by stream, then size, then address, so the
/// first entry at or after `(stream, size, 0)` is the smallest, lowest-addressed free block of
/// that stream that fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FreeKey {
    pub stream: u32,
    pub size: u64,
    pub address: u64,
    pub block: u32,
}

/// Free blocks of one pool.
#[derive(Debug, Default)]
pub(crate) struct FreeIndex {
    set: BTreeSet<FreeKey>,
}

impl FreeIndex {
    #[inline]
    pub fn insert(&mut self, key: FreeKey) {
        let inserted = self.set.insert(key);
        debug_assert!(inserted, "block {} indexed twice", key.block);
    }

    #[inline]
    pub fn remove(&mut self, key: &FreeKey) {
        let removed = self.set.remove(key);
        debug_assert!(removed, "block {} was not indexed", key.block);
    }

    /// The smallest free block of `stream` with at least `size` bytes.
    #[inline]
    pub fn best_fit(&self, stream: u32, size: u64) -> Option<FreeKey> {
        let from = FreeKey {
            stream,
            size,
            address: 0,
            block: 0,
        };
        self.set
            .range(from..)
            .next()
            .copied()
            .filter(|k| k.stream == stream)
    }

    /// Free blocks of `stream` with at least `size` bytes, smallest first.
    pub fn fits_ascending(&self, stream: u32, size: u64) -> impl Iterator<Item = FreeKey> + '_ {
        let from = FreeKey {
            stream,
            size,
            address: 0,
            block: 0,
        };
        self.set
            .range(from..)
            .take_while(move |k| k.stream == stream)
            .copied()
    }

    /// Free blocks of `stream` smaller than `size`, largest first.
    pub fn below_descending(&self, stream: u32, size: u64) -> impl Iterator<Item = FreeKey> + '_ {
        let from = FreeKey {
            stream,
            size: 0,
            address: 0,
            block: 0,
        };
        let to = FreeKey {
            stream,
            size,
            address: 0,
            block: 0,
        };
        self.set
            .range((Bound::Included(from), Bound::Excluded(to)))
            .rev()
            .copied()
    }

    /// Every free block, in index order.
    pub fn iter(&self) -> impl Iterator<Item = FreeKey> + '_ {
        self.set.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }
}
