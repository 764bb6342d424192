//! One ordered set of blocks by (stream, size, address): the unmapped blocks of one segment
//! kind in pages mode, searched for the nearest sizes above and below a request.
//!
//! Each entry is one `u128` (stream, size and address, the last two in 512 B granules) that
//! maps to its block, so that every comparison a search makes is a single integer compare
//! rather than a compare of four fields one by one. The order is exactly that of the tuples
//! (stream, size, address, block): addresses are unique among the blocks of one kind, so the
//! block never decides it, and entries are compared by their key alone.
//!
//! Guarantees: sizes and addresses are multiples of 512 below
//! [`ADDRESS_LIMIT`](super::free_index::ADDRESS_LIMIT), as for the free index; a size from
//! that limit up finds no block above it and every block of its stream below it.

use super::free_index::{ADDRESS_LIMIT, FreeKey};
use super::sorted_set::SortedSet;

/// Bits of a size or an address in granules.
const GRANULE_BITS: u32 = 48;
const GRANULE_MASK: u64 = (1 << GRANULE_BITS) - 1;

/// (stream, size, address) as one integer, ordered as the tuple is.
#[inline]
fn pack(stream: u32, size: u64, address: u64) -> u128 {
    debug_assert!(size < ADDRESS_LIMIT && address < ADDRESS_LIMIT);
    ((stream as u128) << (2 * GRANULE_BITS))
        | (((size >> 9) as u128) << GRANULE_BITS)
        | (address >> 9) as u128
}

#[inline]
fn unpack(packed: u128, block: u32) -> FreeKey {
    FreeKey {
        stream: (packed >> (2 * GRANULE_BITS)) as u32,
        size: (((packed >> GRANULE_BITS) as u64) & GRANULE_MASK) << 9,
        address: ((packed as u64) & GRANULE_MASK) << 9,
        block,
    }
}

/// A packed key and its block, ordered (and equal) by the key alone: keys are unique, so a
/// comparison never needs the block, and a search bound needs none.
#[derive(Debug, Clone, Copy)]
struct Entry {
    packed: u128,
    block: u32,
}

impl Entry {
    /// A search bound: the place of `packed` among the entries.
    #[inline]
    fn bound(packed: u128) -> Entry {
        Entry { packed, block: 0 }
    }
}

impl PartialEq for Entry {
    #[inline]
    fn eq(&self, other: &Entry) -> bool {
        self.packed == other.packed
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    #[inline]
    fn partial_cmp(&self, other: &Entry) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    #[inline]
    fn cmp(&self, other: &Entry) -> std::cmp::Ordering {
        self.packed.cmp(&other.packed)
    }
}

/// Blocks by (stream, size, address).
#[derive(Debug, Default)]
pub(crate) struct SizeOrder {
    /// Entries of unique keys, each with its block.
    entries: SortedSet<Entry>,
    len: usize,
}

/// The entry of `key`.
#[inline]
fn entry(key: &FreeKey) -> Entry {
    Entry {
        packed: pack(key.stream, key.size, key.address),
        block: key.block,
    }
}

impl SizeOrder {
    /// Adds `key` (its block with it); returns whether it was not there. One search: the
    /// engine never holds two blocks at one address, so a key's block never differs.
    #[inline]
    pub fn insert(&mut self, key: FreeKey) -> bool {
        let inserted = self.entries.insert(entry(&key));
        self.len += inserted as usize;
        inserted
    }

    /// Takes `key` (added with the same block) out; returns whether it was there. One
    /// search.
    #[inline]
    pub fn remove(&mut self, key: &FreeKey) -> bool {
        let removed = self.entries.remove(entry(key));
        self.len -= removed as usize;
        removed
    }

    /// Takes `old` out and adds `new` (not in the set) in one step; returns whether `old`
    /// was there.
    #[inline]
    pub fn replace(&mut self, old: &FreeKey, new: FreeKey) -> bool {
        let removed = self.entries.replace(entry(old), entry(&new));
        self.len += usize::from(!removed);
        removed
    }

    /// The blocks of `stream` of at least `size` bytes, smallest (then lowest) first.
    #[inline]
    pub fn fits_ascending(&self, stream: u32, size: u64) -> impl Iterator<Item = FreeKey> + '_ {
        // The stream's last possible key: sizes above the limit start past it (none).
        let to = pack(stream, 0, 0) | ((1u128 << (2 * GRANULE_BITS)) - 1);
        let from = if size < ADDRESS_LIMIT {
            pack(stream, size, 0)
        } else {
            to
        };
        self.entries
            .from(Entry::bound(from))
            .take_while(move |e| e.packed < to)
            .map(|e| unpack(e.packed, e.block))
    }

    /// The blocks of `stream` smaller than `size`, largest (then highest) first.
    #[inline]
    pub fn below_descending(&self, stream: u32, size: u64) -> impl Iterator<Item = FreeKey> + '_ {
        let from = pack(stream, 0, 0);
        // Every key of the stream is below its last possible one, which no block has.
        let to = if size < ADDRESS_LIMIT {
            pack(stream, size, 0)
        } else {
            from | ((1u128 << (2 * GRANULE_BITS)) - 1)
        };
        self.entries
            .below(Entry::bound(to))
            .rev()
            .take_while(move |e| e.packed >= from)
            .map(|e| unpack(e.packed, e.block))
    }

    /// Every block, in (stream, size, address) order.
    pub fn iter(&self) -> impl Iterator<Item = FreeKey> + '_ {
        self.entries.all().map(|e| unpack(e.packed, e.block))
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_rng::xorshift;
    use std::collections::BTreeSet;

    /// The set yields exactly what a sorted set of (stream, size, address, block) tuples
    /// would, for searches above and below any size.
    #[test]
    fn searches_match_a_sorted_set_of_tuples() {
        let mut order = SizeOrder::default();
        let mut reference: BTreeSet<(u32, u64, u64, u32)> = BTreeSet::new();
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let key = |(stream, size, address, block): (u32, u64, u64, u32)| FreeKey {
            stream,
            size,
            address,
            block,
        };
        for round in 0..3000u32 {
            let r = next();
            let stream = [0, 0, 1, 7, u32::MAX][(r % 5) as usize];
            let size = (1u64 << (9 + (r >> 8) % 40)) + ((r >> 50) % 4) * 512;
            let address = (next() % (1 << 47)) * 512;
            if r % 3 == 0 && !reference.is_empty() {
                let nth = (next() % reference.len() as u64) as usize;
                let victim = *reference.iter().nth(nth).unwrap();
                reference.remove(&victim);
                assert!(order.remove(&key(victim)));
            } else if !reference.iter().any(|k| k.2 == address) {
                let entry = (stream, size, address, round);
                assert!(reference.insert(entry));
                assert!(order.insert(key(entry)));
            }
            assert_eq!(order.len(), reference.len());
            let probe_stream = [0, 1, 7, 3, u32::MAX][(next() % 5) as usize];
            let probe = match next() % 8 {
                0 => ADDRESS_LIMIT,
                1 => u64::MAX,
                _ => (1u64 << (9 + next() % 42)) + (next() % 3) * 512,
            };
            let above: Vec<FreeKey> = reference
                .iter()
                .filter(|k| k.0 == probe_stream && k.1 >= probe)
                .take(6)
                .map(|&k| key(k))
                .collect();
            let got: Vec<FreeKey> = order.fits_ascending(probe_stream, probe).take(6).collect();
            assert_eq!(got, above);
            let below: Vec<FreeKey> = reference
                .iter()
                .rev()
                .filter(|k| k.0 == probe_stream && k.1 < probe)
                .take(6)
                .map(|&k| key(k))
                .collect();
            let got: Vec<FreeKey> = order
                .below_descending(probe_stream, probe)
                .take(6)
                .collect();
            assert_eq!(got, below);
        }
        let all: Vec<FreeKey> = order.iter().collect();
        let expected: Vec<FreeKey> = reference.iter().map(|&k| key(k)).collect();
        assert_eq!(all, expected);
    }
}
