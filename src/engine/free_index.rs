//! The ordered set of free blocks of one segment kind, searched best-fit by (stream, size, address).
//!
//! Free blocks are grouped by stream, then by size class: one class for each size below
//! 32 KiB (in 512 B steps) and 8 classes per power of two above. Each class keeps its blocks
//! ordered by (size, address), and a bitmap says which classes hold any. A best-fit search
//! looks in the request's own class and then jumps, through the bitmap, to the next class
//! that holds a block; so its cost depends on how many free blocks share a class, not on how
//! many free blocks there are. The order it yields is exactly the order of one sorted set by
//! (stream, size, address).
//!
//! Each class is a [`SortedSet`]: a sorted vector while it holds few blocks (most do), so
//! that a class going from none to one block and back allocates nothing.
//!
//! Cost: each stream that ever had a free block in the index keeps its classes, 13 KiB of
//! empty sets, for the engine's life. Callers use a handful of streams; one that made up a new
//! stream number per request would pay that much per number.

use super::sorted_set::{Keys, SortedSet};

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

const ADDRESS_BITS: u32 = 48;
/// Sizes and addresses stay below this (128 PiB), so that they fit 48 bits once their low 9
/// bits (always zero: they are multiples of 512) are dropped.
pub(crate) const ADDRESS_LIMIT: u64 = 1 << (ADDRESS_BITS + 9);

/// Sizes below this many 512 B granules (32 KiB) have a class each.
const EXACT_CLASSES: usize = 64;
/// Above, each power of two is cut into 2^SUB_BITS classes. Few classes keep the bitmap
/// short: a search for the next larger block, which often finds none and scans to the end
/// (the default policy's best fit asks for it whenever unmapped space follows the fit),
/// visits 7 words, not the 22 of 32 classes per power of two; the longer classes cost less
/// than that. Of 4, 8, 16 and 32 classes, 8 cost the default policy least on the four
/// traces of issue 21, and `policy:pytorch` about as little as 16 (instructions per op).
const SUB_BITS: u32 = 3;
/// Every size below [`ADDRESS_LIMIT`] has a class below this.
const CLASSES: usize =
    EXACT_CLASSES + ((ADDRESS_BITS as usize - EXACT_CLASSES.ilog2() as usize) << SUB_BITS);
const BITMAP_WORDS: usize = CLASSES.div_ceil(64);

/// The class of a size: monotonic, so that every size of a class is below every size of the
/// next one.
#[inline]
fn class_of(size: u64) -> usize {
    let granules = size >> 9;
    if granules < EXACT_CLASSES as u64 {
        return granules as usize;
    }
    let octave = granules.ilog2();
    let sub = (granules >> (octave - SUB_BITS)) as usize & ((1 << SUB_BITS) - 1);
    EXACT_CLASSES + (((octave - EXACT_CLASSES.ilog2()) as usize) << SUB_BITS) + sub
}

/// (size, address, block) as one integer, so that each comparison is a single `u128`
/// compare. Addresses are unique, so the block never decides the order.
#[inline]
fn pack(size: u64, address: u64, block: u32) -> u128 {
    debug_assert!(size < ADDRESS_LIMIT && address < ADDRESS_LIMIT);
    ((((size >> 9) as u128) << ADDRESS_BITS | (address >> 9) as u128) << 32) | block as u128
}

#[inline]
fn unpack(stream: u32, packed: u128) -> FreeKey {
    let granules = (packed >> 32) as u64 & ((1 << ADDRESS_BITS) - 1);
    FreeKey {
        stream,
        size: ((packed >> (ADDRESS_BITS + 32)) as u64) << 9,
        address: granules << 9,
        block: packed as u32,
    }
}

/// The free blocks of one stream, by size class.
#[derive(Debug)]
struct StreamClasses {
    stream: u32,
    /// Per class: packed (size, address, block).
    classes: Vec<SortedSet<u128>>,
    /// Bit `c` is set while class `c` holds a block.
    occupied: [u64; BITMAP_WORDS],
}

impl StreamClasses {
    fn new(stream: u32) -> StreamClasses {
        StreamClasses {
            stream,
            classes: (0..CLASSES).map(|_| SortedSet::default()).collect(),
            occupied: [0; BITMAP_WORDS],
        }
    }

    /// The first occupied class at or above `class`.
    #[inline]
    fn occupied_from(&self, class: usize) -> Option<usize> {
        const LAST: usize = BITMAP_WORDS - 1;
        let mut word = class / 64;
        if word > LAST {
            return None;
        }
        let mut bits = self.occupied[word] & (!0u64 << (class % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            if word == LAST {
                return None;
            }
            word += 1;
            bits = self.occupied[word];
        }
    }

    /// The last occupied class at or below `class`.
    fn occupied_to(&self, class: usize) -> Option<usize> {
        let mut word = class / 64;
        let mut bits = self.occupied[word] & (!0u64 >> (63 - class % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + 63 - bits.leading_zeros() as usize);
            }
            if word == 0 {
                return None;
            }
            word -= 1;
            bits = self.occupied[word];
        }
    }

    #[inline]
    fn mark(&mut self, class: usize) {
        self.occupied[class / 64] |= 1 << (class % 64);
    }

    #[inline]
    fn unmark_if_empty(&mut self, class: usize) {
        if self.classes[class].is_empty() {
            self.occupied[class / 64] &= !(1 << (class % 64));
        }
    }

    /// Blocks of at least `size` bytes, in (size, address) order.
    #[inline]
    fn fits_ascending(&self, size: u64) -> Ascending<'_> {
        self.ascending_from(class_of(size), pack(size, 0, 0))
    }

    /// Blocks whose packed key is at least `bound`, which lies in `class`, in ascending
    /// order.
    #[inline]
    fn ascending_from(&self, class: usize, bound: u128) -> Ascending<'_> {
        Ascending {
            stream: self.stream,
            classes: Some(self),
            class,
            within: self.classes[class].from(bound),
        }
    }

    /// Blocks smaller than `size`, in descending (size, address) order.
    #[inline]
    fn below_descending(&self, size: u64) -> Descending<'_> {
        let class = class_of(size);
        Descending {
            stream: self.stream,
            classes: Some(self),
            class,
            within: self.classes[class].below(pack(size, 0, 0)),
        }
    }
}

/// A free block found in the index, with where it sits there: [`Cursor::next`] finds the
/// block after it in (size, address) order with a step rather than a search. Valid while
/// the index is unchanged (it borrows it).
#[derive(Clone, Copy)]
pub(crate) struct Cursor<'a> {
    classes: &'a StreamClasses,
    class: usize,
    /// The block's position in its class (see [`SortedSet::after`]).
    at: usize,
    packed: u128,
}

impl<'a> Cursor<'a> {
    /// The cursor at the first block of an occupied class at or above `class`.
    #[inline]
    fn first_from_class(classes: &'a StreamClasses, class: usize) -> Option<Cursor<'a>> {
        let class = classes.occupied_from(class)?;
        let (packed, at) = classes.classes[class].first_at()?;
        Some(Cursor {
            classes,
            class,
            at,
            packed,
        })
    }

    /// The block.
    #[inline]
    pub fn key(&self) -> FreeKey {
        unpack(self.classes.stream, self.packed)
    }

    /// The block's size.
    #[inline]
    pub fn size(&self) -> u64 {
        ((self.packed >> (ADDRESS_BITS + 32)) as u64) << 9
    }

    /// The next free block of the same stream in (size, address) order (the one
    /// [`FreeIndex::fits_ascending`] yields after this one) if it has fewer than `limit`
    /// bytes: its size is read before the rest of its key is unpacked.
    #[inline(always)]
    pub fn next_below(self, limit: u64) -> Option<Cursor<'a>> {
        let next = match self.classes.classes[self.class].after(self.packed, self.at) {
            Some((packed, at)) => Cursor { packed, at, ..self },
            None => Cursor::first_from_class(self.classes, self.class + 1)?,
        };
        (next.size() < limit).then_some(next)
    }
}

/// Free blocks of one stream in ascending (size, address) order from a bound: the rest of
/// one class, then whole classes that the bitmap says are occupied. A plain struct rather
/// than a chain of adapters, so that taking the first block or two costs little more than
/// one lookup (best fit runs on every allocation).
pub(crate) struct Ascending<'a> {
    stream: u32,
    /// `None` for a stream with no free block ever: the iterator is empty.
    classes: Option<&'a StreamClasses>,
    class: usize,
    within: Keys<'a, u128>,
}

impl Ascending<'_> {
    fn empty() -> Self {
        Ascending {
            stream: 0,
            classes: None,
            class: 0,
            within: Keys::empty(),
        }
    }
}

impl Iterator for Ascending<'_> {
    type Item = FreeKey;

    #[inline]
    fn next(&mut self) -> Option<FreeKey> {
        loop {
            if let Some(k) = self.within.next() {
                return Some(unpack(self.stream, k));
            }
            let classes = self.classes?;
            self.class = classes.occupied_from(self.class + 1)?;
            self.within = classes.classes[self.class].all();
        }
    }
}

/// Free blocks of one stream in descending (size, address) order below a bound.
pub(crate) struct Descending<'a> {
    stream: u32,
    /// `None` for a stream with no free block ever: the iterator is empty.
    classes: Option<&'a StreamClasses>,
    class: usize,
    within: Keys<'a, u128>,
}

impl Descending<'_> {
    fn empty() -> Self {
        Descending {
            stream: 0,
            classes: None,
            class: 0,
            within: Keys::empty(),
        }
    }
}

impl Iterator for Descending<'_> {
    type Item = FreeKey;

    /// Always inline: a miss of the default policy walks up to 8 steps of it (the third
    /// search of its placement), where a call's cost is a fair share of a step's.
    #[inline(always)]
    fn next(&mut self) -> Option<FreeKey> {
        loop {
            if let Some(k) = self.within.next_back() {
                return Some(unpack(self.stream, k));
            }
            let classes = self.classes?;
            let below = self.class.checked_sub(1)?;
            self.class = classes.occupied_to(below)?;
            self.within = classes.classes[self.class].all();
        }
    }
}

/// Free blocks of one segment kind.
#[derive(Debug, Default)]
pub(crate) struct FreeIndex {
    /// One entry per stream that ever had a free block, by ascending stream.
    streams: Vec<StreamClasses>,
    len: usize,
}

impl FreeIndex {
    #[inline]
    fn stream(&self, stream: u32) -> Option<&StreamClasses> {
        // Nearly always one stream: look at the first before searching.
        match self.streams.first() {
            Some(s) if s.stream == stream => Some(s),
            _ => self
                .streams
                .binary_search_by_key(&stream, |s| s.stream)
                .ok()
                .map(|i| &self.streams[i]),
        }
    }

    #[inline]
    fn stream_mut(&mut self, stream: u32) -> &mut StreamClasses {
        // Nearly always the first stream: that test stays inline, the rest does not.
        match self.streams.first() {
            Some(s) if s.stream == stream => &mut self.streams[0],
            _ => self.other_stream_mut(stream),
        }
    }

    /// [`Self::stream_mut`] for a stream other than the first, added if new.
    #[cold]
    #[inline(never)]
    fn other_stream_mut(&mut self, stream: u32) -> &mut StreamClasses {
        let i = self
            .streams
            .binary_search_by_key(&stream, |s| s.stream)
            .unwrap_or_else(|i| {
                self.streams.insert(i, StreamClasses::new(stream));
                i
            });
        &mut self.streams[i]
    }

    #[inline]
    pub fn insert(&mut self, key: FreeKey) {
        let classes = self.stream_mut(key.stream);
        let class = class_of(key.size);
        let inserted = classes.classes[class].insert(pack(key.size, key.address, key.block));
        debug_assert!(inserted, "block {} indexed twice", key.block);
        classes.mark(class);
        self.len += 1;
    }

    #[inline]
    pub fn remove(&mut self, key: &FreeKey) {
        let classes = self.stream_mut(key.stream);
        let class = class_of(key.size);
        let removed = classes.classes[class].remove(pack(key.size, key.address, key.block));
        debug_assert!(removed, "block {} was not indexed", key.block);
        classes.unmark_if_empty(class);
        self.len -= 1;
    }

    /// The smallest free block of `stream` with at least `size` bytes, lowest address first.
    /// No block reaches [`ADDRESS_LIMIT`], so larger sizes find none.
    #[inline]
    pub fn best_fit(&self, stream: u32, size: u64) -> Option<FreeKey> {
        if size >= ADDRESS_LIMIT {
            return None;
        }
        let classes = self.stream(stream)?;
        let class = class_of(size);
        if let Some(k) = classes.classes[class].first_from(pack(size, 0, 0)) {
            return Some(unpack(stream, k));
        }
        let above = classes.occupied_from(class + 1)?;
        let k = classes.classes[above].first()?;
        Some(unpack(stream, k))
    }

    /// [`Self::best_fit`] as a [`Cursor`], for a caller that may step on to the next
    /// larger blocks.
    #[inline]
    pub fn best_fit_cursor(&self, stream: u32, size: u64) -> Option<Cursor<'_>> {
        if size >= ADDRESS_LIMIT {
            return None;
        }
        let classes = self.stream(stream)?;
        let class = class_of(size);
        match classes.classes[class].first_from_at(pack(size, 0, 0)) {
            Some((packed, at)) => Some(Cursor {
                classes,
                class,
                at,
                packed,
            }),
            None => Cursor::first_from_class(classes, class + 1),
        }
    }

    /// Free blocks of `stream` with at least `size` bytes, smallest first (none from
    /// [`ADDRESS_LIMIT`] up). The first is [`Self::best_fit`]'s answer.
    #[inline]
    pub fn fits_ascending(&self, stream: u32, size: u64) -> Ascending<'_> {
        match self.stream(stream) {
            Some(classes) if size < ADDRESS_LIMIT => classes.fits_ascending(size),
            _ => Ascending::empty(),
        }
    }

    /// Free blocks of `stream` smaller than `size`, largest first (all of them from
    /// [`ADDRESS_LIMIT`] up).
    #[inline]
    pub fn below_descending(&self, stream: u32, size: u64) -> Descending<'_> {
        // Every block is below the limit: a larger bound is the same as the largest one.
        let size = size.min(ADDRESS_LIMIT - 512);
        match self.stream(stream) {
            Some(classes) => classes.below_descending(size),
            None => Descending::empty(),
        }
    }

    /// Every free block, in (stream, size, address) order.
    pub fn iter(&self) -> impl Iterator<Item = FreeKey> + '_ {
        self.streams
            .iter()
            .flat_map(|classes| classes.fits_ascending(0))
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_rng::xorshift;
    use std::collections::BTreeMap;

    #[test]
    fn classes_are_monotonic_and_in_range() {
        let mut previous = 0;
        let mut size = 512u64;
        while size < ADDRESS_LIMIT {
            for s in [size, size + 512, size * 3 / 2 / 512 * 512, size * 2 - 512] {
                assert!(s >= ADDRESS_LIMIT || class_of(s) < CLASSES, "size {s}");
            }
            let c = class_of(size);
            assert!(c >= previous, "class of {size} went down");
            previous = c;
            size += size / 37 / 512 * 512 + 512;
        }
        assert_eq!(class_of(ADDRESS_LIMIT - 512), CLASSES - 1);
        assert_eq!(class_of(512), 1);
        assert_eq!(class_of(32 << 10), EXACT_CLASSES);
    }

    /// The index yields exactly what one sorted map of (stream, size, address) would.
    #[test]
    fn searches_match_a_sorted_map() {
        let mut index = FreeIndex::default();
        let mut reference: BTreeMap<(u32, u64, u64), u32> = BTreeMap::new();
        let mut next = xorshift(0x1234_5678_9abc_def0u64);
        let key = |(stream, size, address): (u32, u64, u64), block| FreeKey {
            stream,
            size,
            address,
            block,
        };
        for round in 0..4000u32 {
            let r = next();
            let stream = [0, 0, 0, 7, 3][(r % 5) as usize];
            // Sizes from 512 B to 64 GiB, log-uniform, with many repeats.
            let size = (1u64 << (9 + (r >> 8) % 28)) + ((r >> 40) % 4) * 512;
            let address = (next() % (1 << 40)) * 512;
            if r % 3 == 0 && !reference.is_empty() {
                let nth = (next() % reference.len() as u64) as usize;
                let (&victim, &block) = reference.iter().nth(nth).unwrap();
                reference.remove(&victim);
                index.remove(&key(victim, block));
            } else if let std::collections::btree_map::Entry::Vacant(slot) =
                reference.entry((stream, size, address))
            {
                slot.insert(round);
                index.insert(key((stream, size, address), round));
            }
            assert_eq!(index.len(), reference.len());
            let probe_stream = [0, 7, 3, 5][(next() % 4) as usize];
            let probe = (1u64 << (9 + next() % 30)) + (next() % 3) * 512;
            let expected: Vec<FreeKey> = reference
                .range((probe_stream, probe, 0)..(probe_stream + 1, 0, 0))
                .take(5)
                .map(|(&k, &b)| key(k, b))
                .collect();
            let got: Vec<FreeKey> = index.fits_ascending(probe_stream, probe).take(5).collect();
            assert_eq!(got, expected);
            assert_eq!(
                index.best_fit(probe_stream, probe),
                expected.first().copied()
            );
            let stepped: Vec<FreeKey> =
                std::iter::successors(index.best_fit_cursor(probe_stream, probe), |cursor| {
                    cursor.next_below(u64::MAX)
                })
                .map(|cursor| cursor.key())
                .take(5)
                .collect();
            assert_eq!(stepped, expected);
            // With a limit, the steps stop at the first block that reaches it.
            let limit = probe * 2 + (next() % 3) * 512;
            let below_limit: Vec<FreeKey> =
                std::iter::successors(index.best_fit_cursor(probe_stream, probe), |cursor| {
                    cursor.next_below(limit)
                })
                .map(|cursor| cursor.key())
                .take(5)
                .collect();
            let mut expected_below_limit = expected.clone();
            if let Some(first_over) = expected.iter().skip(1).position(|k| k.size >= limit) {
                expected_below_limit.truncate(first_over + 1);
            }
            assert_eq!(below_limit, expected_below_limit);
            let expected_below: Vec<FreeKey> = reference
                .range((probe_stream, 0, 0)..(probe_stream, probe, 0))
                .rev()
                .take(5)
                .map(|(&k, &b)| key(k, b))
                .collect();
            let got_below: Vec<FreeKey> = index
                .below_descending(probe_stream, probe)
                .take(5)
                .collect();
            assert_eq!(got_below, expected_below);
        }
        // Sizes beyond any block (the OOM path may ask with user-set sizes) find nothing
        // above and everything below, without leaving the class table.
        for huge in [ADDRESS_LIMIT, ADDRESS_LIMIT + 512, u64::MAX] {
            assert_eq!(index.best_fit(0, huge), None);
            assert_eq!(index.fits_ascending(0, huge).count(), 0);
            let below = index.below_descending(0, huge).count();
            assert_eq!(below, reference.keys().filter(|k| k.0 == 0).count());
        }
        let all: Vec<FreeKey> = index.iter().collect();
        let expected_all: Vec<FreeKey> = reference.iter().map(|(&k, &b)| key(k, b)).collect();
        assert_eq!(all, expected_all);
    }
}
