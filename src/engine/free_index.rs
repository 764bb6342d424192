//! The ordered set of free blocks of one pool, searched best-fit by (stream, size, address).

use std::collections::BTreeMap;

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

const SIZE_BITS: u32 = 48;
const ADDRESS_BITS: u32 = 48;
/// Sizes and addresses stay below this (128 PiB), so that they fit their 48 key bits.
pub(crate) const ADDRESS_LIMIT: u64 = 1 << (ADDRESS_BITS + 9);

/// The key as one integer, so that each comparison in the tree is a single `u128` compare:
/// 32 bits of stream, 48 of size and 48 of address. Sizes and addresses are multiples of
/// 512, so their low 9 bits are dropped.
#[inline]
fn pack(stream: u32, size: u64, address: u64) -> u128 {
    debug_assert!(size < ADDRESS_LIMIT && address < ADDRESS_LIMIT);
    ((stream as u128) << (SIZE_BITS + ADDRESS_BITS))
        | (((size >> 9) as u128) << ADDRESS_BITS)
        | (address >> 9) as u128
}

#[inline]
fn unpack(packed: u128, block: u32) -> FreeKey {
    FreeKey {
        stream: (packed >> (SIZE_BITS + ADDRESS_BITS)) as u32,
        size: (((packed >> ADDRESS_BITS) as u64) & ((1 << SIZE_BITS) - 1)) << 9,
        address: ((packed as u64) & ((1 << ADDRESS_BITS) - 1)) << 9,
        block,
    }
}

/// Free blocks of one pool.
#[derive(Debug, Default)]
pub(crate) struct FreeIndex {
    map: BTreeMap<u128, u32>,
}

impl FreeIndex {
    #[inline]
    pub fn insert(&mut self, key: FreeKey) {
        let previous = self
            .map
            .insert(pack(key.stream, key.size, key.address), key.block);
        debug_assert!(previous.is_none(), "block {} indexed twice", key.block);
    }

    #[inline]
    pub fn remove(&mut self, key: &FreeKey) {
        let removed = self.map.remove(&pack(key.stream, key.size, key.address));
        debug_assert_eq!(
            removed,
            Some(key.block),
            "block {} was not indexed",
            key.block
        );
    }

    /// The smallest free block of `stream` with at least `size` bytes, lowest address first.
    #[inline]
    pub fn best_fit(&self, stream: u32, size: u64) -> Option<FreeKey> {
        self.fits_ascending(stream, size).next()
    }

    /// Free blocks of `stream` with at least `size` bytes, smallest first.
    #[inline]
    pub fn fits_ascending(&self, stream: u32, size: u64) -> impl Iterator<Item = FreeKey> + '_ {
        self.map
            .range(pack(stream, size, 0)..)
            .map(|(&k, &b)| unpack(k, b))
            .take_while(move |k| k.stream == stream)
    }

    /// Free blocks of `stream` smaller than `size`, largest first.
    pub fn below_descending(&self, stream: u32, size: u64) -> impl Iterator<Item = FreeKey> + '_ {
        self.map
            .range(pack(stream, 0, 0)..pack(stream, size, 0))
            .rev()
            .map(|(&k, &b)| unpack(k, b))
    }

    /// Every free block, in index order.
    pub fn iter(&self) -> impl Iterator<Item = FreeKey> + '_ {
        self.map.iter().map(|(&k, &b)| unpack(k, b))
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
}
