//! Spare pool references: the strong references to a pool that blocks freed through the
//! engine gave up, kept under the pool's lock for the next blocks the engine hands out.
//!
//! Every [`Block`](super::Block) holds a strong reference to its pool. Without this bank, the
//! reuse cache's blocks returned to the engine count the pool's references down, and the
//! next blocks placed by the engine count them up again: atomic read-modify-writes on one
//! shared counter that the engine alone never pays. With it, the references move from the
//! freed blocks to the next ones, and the counter is untouched.
//!
//! Guarantees:
//! - the bank holds only references to one owner (a reference to another is refused and
//!   handed back), and every banked reference comes out exactly once: taken for a block,
//!   or in [`SpareRefs::take_all`];
//! - it is meant to live inside the owner it refers to (in the pool's state), so it keeps
//!   its owner alive: the owner's last handle must empty it with
//!   [`take_all`](SpareRefs::take_all). Callers bank only while a handle is open, reading
//!   the handle count under the same lock as the last handle's `take_all`, so no reference
//!   is banked after it.

use std::ptr::NonNull;
use std::sync::Arc;

/// Strong references to one owner, held as a count of references given up by
/// [`Arc::into_raw`].
pub(crate) struct SpareRefs<O> {
    /// The pointer [`Arc::into_raw`] returned for the references banked (the same for every
    /// reference to one owner); `None` until the first.
    owner: Option<NonNull<O>>,
    /// References banked and not taken back.
    count: usize,
}

// SAFETY: the bank stands for `count` values of `Arc<O>`, which may move between threads
// when `O: Send + Sync`; the pointer is only turned back into those values.
#[allow(unsafe_code)]
unsafe impl<O: Send + Sync> Send for SpareRefs<O> {}

impl<O> SpareRefs<O> {
    /// An empty bank.
    pub fn new() -> Self {
        SpareRefs {
            owner: None,
            count: 0,
        }
    }

    /// References banked.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Banks `reference` if `open` (the owner has open handles) and it refers to the owner
    /// of the references already banked; otherwise hands it back, for the caller to drop
    /// (after releasing the lock where the bank lives, if it may be the owner's last).
    #[inline]
    pub fn bank(&mut self, reference: Arc<O>, open: bool) -> Option<Arc<O>> {
        if !open {
            return Some(reference);
        }
        match self.owner {
            Some(owner) if owner.as_ptr().cast_const() != Arc::as_ptr(&reference) => {
                Some(reference)
            }
            _ => {
                self.owner = Some(
                    NonNull::new(Arc::into_raw(reference).cast_mut())
                        .expect("Arc::into_raw returns the non-null pointer of a live allocation"),
                );
                self.count += 1;
                None
            }
        }
    }

    /// A banked reference, if any.
    #[inline]
    #[allow(unsafe_code)]
    pub fn take(&mut self) -> Option<Arc<O>> {
        if self.count == 0 {
            return None;
        }
        self.count -= 1;
        let owner = self
            .owner
            .expect("a bank with references knows their owner");
        // SAFETY: `owner` came from `Arc::into_raw` of a reference to this owner, and each
        // such reference banked is taken back once: `count` was positive, so one of them is
        // still given up, and this call takes exactly that one back.
        Some(unsafe { Arc::from_raw(owner.as_ptr().cast_const()) })
    }

    /// Every banked reference, for the caller to drop once it no longer needs the owner
    /// (dropping them may drop the owner, and the bank with it).
    pub fn take_all(&mut self) -> Vec<Arc<O>> {
        std::iter::from_fn(|| self.take()).collect()
    }
}

impl<O> Drop for SpareRefs<O> {
    fn drop(&mut self) {
        // A bank inside its owner cannot be dropped while it holds references (they keep the
        // owner alive); one elsewhere gives them back here.
        drop(self.take_all());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Banking moves references in without touching the count; taking moves them out.
    #[test]
    fn references_move_through_the_bank_without_counting() {
        let owner = Arc::new(7u32);
        let mut bank = SpareRefs::new();
        assert!(bank.take().is_none(), "an empty bank has nothing");
        for _ in 0..3 {
            assert!(bank.bank(owner.clone(), true).is_none(), "banked");
        }
        assert_eq!(bank.len(), 3);
        assert_eq!(
            Arc::strong_count(&owner),
            4,
            "banked references stay counted"
        );
        let taken = bank.take().expect("a banked reference");
        assert!(Arc::ptr_eq(&taken, &owner));
        assert_eq!(*taken, 7);
        assert_eq!(
            Arc::strong_count(&owner),
            4,
            "taking one back counts nothing"
        );
        drop(taken);
        assert_eq!(bank.len(), 2);
        let all = bank.take_all();
        assert_eq!((all.len(), bank.len()), (2, 0));
        drop(all);
        assert_eq!(Arc::strong_count(&owner), 1, "each reference came out once");
    }

    /// A closed owner or a foreign reference is handed back, never banked.
    #[test]
    fn closed_owners_and_foreign_references_are_handed_back() {
        let (first, other) = (Arc::new(1u32), Arc::new(2u32));
        let mut bank = SpareRefs::new();
        let back = bank
            .bank(first.clone(), false)
            .expect("no open handle: handed back");
        assert!(Arc::ptr_eq(&back, &first));
        drop(back);
        assert!(bank.bank(first.clone(), true).is_none());
        let back = bank
            .bank(other.clone(), true)
            .expect("another owner: handed back");
        assert!(Arc::ptr_eq(&back, &other));
        drop(back);
        assert_eq!((bank.len(), Arc::strong_count(&other)), (1, 1));
        drop(bank);
        assert_eq!(
            Arc::strong_count(&first),
            1,
            "a dropped bank gives its references back"
        );
    }
}
