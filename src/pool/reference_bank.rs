//! The reference bank: strong references to the pool that blocks gave back, kept counted for
//! the next blocks, so that a block's reference to its pool costs no atomic operation when
//! the pool's lock is held anyway.
//!
//! Every [`Block`](super::Block) holds an `Arc` of its pool. Cloning one and dropping one
//! are each an atomic read-modify-write on the pool's shared count, about 11 ns each on an
//! H100 host (docs/BENCHMARKS.md, call 48), where the engine's whole allocation takes
//! about 45 ns. Blocks parked in the reuse cache bring their reference with them; when the
//! cache is drained under the pool's lock, the bank keeps those references as a plain count
//! instead of dropping them, and the next allocation under the lock takes one back instead
//! of cloning.
//!
//! # The `unsafe` rules
//!
//! 1. **Each banked count is one strong count of the bank's owner.** [`ReferenceBank::deposit`]
//!    keeps an `Arc` only if it points at the owner it is told (checked), by
//!    [`Arc::into_raw`], which leaves its count in place.
//! 2. **A withdrawal turns one banked count back into an `Arc`** with [`Arc::from_raw`] of
//!    the owner's pointer: the count it takes over is the one rule 1 left.
//! 3. **Releasing never drops the owner.** [`ReferenceBank::release`] gives every banked
//!    count back while its caller reaches the owner through a reference of its own, which
//!    outlives the call, so none of the counts given back is the last.
//!
//! The bank lives inside its owner, so banked counts keep the owner alive: the owner must
//! release them when nothing can withdraw any more (the pool does, when its last handle
//! drops) and bank nothing after that. A bank dropped while it holds counts cannot happen
//! (its counts keep its owner, and so itself, alive); the unit tests check the counts.

use std::marker::PhantomData;
use std::sync::Arc;

/// Strong references to one owner `T`, kept as a count. See the module's rules.
pub(crate) struct ReferenceBank<T> {
    held: usize,
    // The bank owns counts of a `T` without holding a pointer to it.
    owner: PhantomData<fn() -> T>,
}

impl<T> Default for ReferenceBank<T> {
    fn default() -> Self {
        ReferenceBank {
            held: 0,
            owner: PhantomData,
        }
    }
}

impl<T> ReferenceBank<T> {
    /// References held.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held
    }

    /// Keeps `reference` when it points at `owner`; drops it otherwise.
    #[inline]
    pub fn deposit(&mut self, owner: &T, reference: Arc<T>) {
        if std::ptr::eq(Arc::as_ptr(&reference), owner) {
            // Rule 1: the count stays, now the bank's.
            let _ = Arc::into_raw(reference);
            self.held += 1;
        }
    }

    /// A reference to `owner`: a banked one where the bank holds any, else a new clone.
    /// `owner` must be the owner whose references were deposited.
    #[inline]
    #[allow(unsafe_code)]
    pub fn withdraw(&mut self, owner: &Arc<T>) -> Arc<T> {
        if self.held == 0 {
            return owner.clone();
        }
        self.held -= 1;
        // SAFETY: rule 2: one count of `owner` was left by `deposit`, which checked the
        // pointer, and no one else owns it.
        unsafe { Arc::from_raw(Arc::as_ptr(owner)) }
    }

    /// Gives every banked reference back. The caller reaches `owner` through a reference of
    /// its own, held across the call (rule 3).
    #[allow(unsafe_code)]
    pub fn release(&mut self, owner: &Arc<T>) {
        while self.held > 0 {
            self.held -= 1;
            // SAFETY: rules 1 and 3: a count the bank owns, never the owner's last, since
            // `owner` itself is one more.
            unsafe { Arc::decrement_strong_count(Arc::as_ptr(owner)) };
        }
    }
}

impl<T> Drop for ReferenceBank<T> {
    fn drop(&mut self) {
        debug_assert_eq!(
            self.held, 0,
            "banked references keep the bank's owner alive, so they are gone when it drops"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Mutex, Weak};

    use super::*;

    /// An owner with a bank inside it, as `PoolShared` has one in its state.
    #[derive(Default)]
    struct Owner {
        bank: Mutex<ReferenceBank<Owner>>,
    }

    fn deposit(owner: &Arc<Owner>, reference: Arc<Owner>) {
        owner.bank.lock().unwrap().deposit(owner, reference);
    }

    fn held(owner: &Owner) -> usize {
        owner.bank.lock().unwrap().held()
    }

    /// Drops the last reference and says whether the owner is gone with it.
    fn gone_with(owner: Arc<Owner>) -> bool {
        let weak: Weak<Owner> = Arc::downgrade(&owner);
        drop(owner);
        weak.upgrade().is_none()
    }

    #[test]
    fn deposits_and_withdrawals_keep_the_strong_count() {
        let owner = Arc::new(Owner::default());
        let references: Vec<Arc<Owner>> = (0..5).map(|_| owner.clone()).collect();
        assert_eq!(Arc::strong_count(&owner), 6);
        for reference in references {
            deposit(&owner, reference);
        }
        // Banked references still count: nothing was dropped.
        assert_eq!(Arc::strong_count(&owner), 6);
        assert_eq!(held(&owner), 5);
        let taken: Vec<Arc<Owner>> = (0..7)
            .map(|_| owner.bank.lock().unwrap().withdraw(&owner))
            .collect();
        // Five came from the bank, two are new clones.
        assert_eq!(held(&owner), 0);
        assert_eq!(Arc::strong_count(&owner), 8);
        assert!(taken.iter().all(|t| Arc::ptr_eq(t, &owner)));
        drop(taken);
        assert_eq!(Arc::strong_count(&owner), 1);
        assert!(gone_with(owner));
    }

    #[test]
    fn a_reference_to_another_owner_is_dropped_not_banked() {
        let owner = Arc::new(Owner::default());
        let other = Arc::new(Owner::default());
        let weak = Arc::downgrade(&other);
        deposit(&owner, other);
        assert_eq!(held(&owner), 0);
        assert!(weak.upgrade().is_none(), "its last reference was dropped");
        assert_eq!(Arc::strong_count(&owner), 1);
    }

    #[test]
    fn releasing_gives_every_count_back_and_the_owner_then_drops() {
        let owner = Arc::new(Owner::default());
        for _ in 0..3 {
            deposit(&owner, owner.clone());
        }
        assert_eq!(Arc::strong_count(&owner), 4);
        owner.bank.lock().unwrap().release(&owner);
        assert_eq!(held(&owner), 0);
        assert_eq!(
            Arc::strong_count(&owner),
            1,
            "the caller's reference keeps it"
        );
        assert!(gone_with(owner));
    }
}
