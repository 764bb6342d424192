//! Residency's pure core: which blocks leave the device to make room under a budget,
//! with no wgpu and no locks.
//!
//! The caller lists every tracked block on the device with the bytes its eviction gives
//! back, the tick it was last used at, and whether it may go. [`choose_victims`] picks the
//! blocks to evict.
//!
//! Guarantees, each tested below:
//! - a block that may not go (pinned, in an open recording, or kept by the caller) is never
//!   chosen;
//! - blocks are chosen least recently used first, ties broken by the smaller key;
//! - the choice is the shortest such prefix that frees at least `needed` bytes; when even
//!   every candidate does not, nothing is chosen and the [`Shortfall`] says what was held
//!   back and why.

/// Why a block on the device may not be evicted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// It may go.
    None,
    /// The application pinned it.
    Pinned,
    /// A recording still open may name it, or a transfer of the pool's is using it.
    InUse,
    /// The caller needs it on the device (the blocks of the same request).
    Kept,
}

/// A tracked block on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// The caller's key for the block.
    pub key: u64,
    /// Device bytes its eviction gives back.
    pub bytes: u64,
    /// When it was last used: a larger tick is more recent.
    pub last_use: u64,
    pub hold: Hold,
}

/// Room that could not be made: `needed` bytes, with only `evictable` bytes that may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shortfall {
    /// The bytes asked for.
    pub needed: u64,
    /// The bytes every block that may go would give back.
    pub evictable: u64,
    /// Bytes of pinned blocks on the device.
    pub pinned: u64,
    /// Bytes of blocks that open recordings (or the pool's own transfers) use.
    pub in_use: u64,
    /// Bytes of blocks the same request needs on the device.
    pub kept: u64,
}

/// The keys of the blocks to evict so that at least `needed` bytes come free, least recently
/// used first (see the module's guarantees). `needed == 0` chooses nothing.
///
/// # Errors
///
/// [`Shortfall`] when every block that may go would not free `needed` bytes; nothing is
/// chosen.
pub(crate) fn choose_victims(
    candidates: &mut [Candidate],
    needed: u64,
) -> Result<Vec<u64>, Shortfall> {
    if needed == 0 {
        return Ok(Vec::new());
    }
    candidates.sort_unstable_by_key(|c| (c.last_use, c.key));
    let mut freed = 0u64;
    let mut chosen = Vec::new();
    for candidate in candidates.iter().filter(|c| c.hold == Hold::None) {
        chosen.push(candidate.key);
        freed = freed.saturating_add(candidate.bytes);
        if freed >= needed {
            return Ok(chosen);
        }
    }
    let mut short = Shortfall {
        needed,
        evictable: freed,
        ..Shortfall::default()
    };
    for candidate in candidates.iter() {
        match candidate.hold {
            Hold::None => {}
            Hold::Pinned => short.pinned += candidate.bytes,
            Hold::InUse => short.in_use += candidate.bytes,
            Hold::Kept => short.kept += candidate.bytes,
        }
    }
    Err(short)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(list: &[(u64, u64, u64, Hold)]) -> Vec<Candidate> {
        list.iter()
            .map(|&(key, bytes, last_use, hold)| Candidate {
                key,
                bytes,
                last_use,
                hold,
            })
            .collect()
    }

    #[test]
    fn least_recently_used_go_first_and_only_as_many_as_needed() {
        let mut list = blocks(&[
            (1, 100, 40, Hold::None),
            (2, 100, 10, Hold::None),
            (3, 100, 20, Hold::None),
            (4, 100, 30, Hold::None),
        ]);
        assert_eq!(choose_victims(&mut list, 150), Ok(vec![2, 3]));
        assert_eq!(choose_victims(&mut list, 100), Ok(vec![2]));
        assert_eq!(choose_victims(&mut list, 1), Ok(vec![2]));
        assert_eq!(choose_victims(&mut list, 0), Ok(vec![]));
        assert_eq!(choose_victims(&mut list, 400), Ok(vec![2, 3, 4, 1]));
    }

    #[test]
    fn ties_go_by_the_smaller_key() {
        let mut list = blocks(&[(9, 100, 5, Hold::None), (3, 100, 5, Hold::None)]);
        assert_eq!(choose_victims(&mut list, 100), Ok(vec![3]));
    }

    #[test]
    fn held_blocks_are_never_chosen_and_the_shortfall_says_why() {
        let mut list = blocks(&[
            (1, 100, 1, Hold::Pinned),
            (2, 200, 2, Hold::InUse),
            (3, 300, 3, Hold::Kept),
            (4, 50, 4, Hold::None),
            (5, 60, 5, Hold::None),
        ]);
        assert_eq!(choose_victims(&mut list, 100), Ok(vec![4, 5]));
        assert_eq!(
            choose_victims(&mut list, 111),
            Err(Shortfall {
                needed: 111,
                evictable: 110,
                pinned: 100,
                in_use: 200,
                kept: 300
            })
        );
    }

    #[test]
    fn nothing_to_evict_is_a_shortfall_of_everything() {
        assert_eq!(
            choose_victims(&mut [], 1),
            Err(Shortfall {
                needed: 1,
                ..Shortfall::default()
            })
        );
    }
}
