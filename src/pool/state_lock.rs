//! The pool's state lock: a mutex that the pool's owner thread enters without a locked
//! instruction while the [owner bias](super::owner_bias) holds.
//!
//! Guarantees: at most one thread reaches the value at a time, and each one sees every write
//! of the one before (the bias's protocol before its revocation, the mutex after). The guard
//! cannot leave its thread. Like the pool's earlier `Mutex`, a panic inside the lock does not
//! poison it: wgpool runs no caller code and does not panic while it holds the lock.
//!
//! # The `unsafe` rule
//!
//! `value` is reached only through a [`StateGuard`], and a guard exists only while its
//! thread holds the lock: either [`OwnerBias::enter`] returned `true` for
//! [`Slot::State`] (the guard leaves the slot when dropped), or the thread holds `mutex`,
//! which it takes only after `enter` returned `false`, that is once no biased section of
//! another thread can run.

use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex, MutexGuard};

use super::owner_bias::{OwnerBias, Slot};

pub(crate) struct StateLock<T> {
    bias: Arc<OwnerBias>,
    mutex: Mutex<()>,
    value: UnsafeCell<T>,
}

// SAFETY: the rule of the module documentation: the value is reached by one thread at a
// time, so sharing the lock shares no unsynchronized access; the value moves between the
// threads that hold the lock, hence `T: Send`.
#[allow(unsafe_code)]
unsafe impl<T: Send> Sync for StateLock<T> {}

impl<T> StateLock<T> {
    /// A lock over `value`, biased to its first user where `bias` holds.
    pub fn new(bias: Arc<OwnerBias>, value: T) -> Self {
        StateLock {
            bias,
            mutex: Mutex::new(()),
            value: UnsafeCell::new(value),
        }
    }

    /// The bias the lock follows.
    pub fn bias(&self) -> &OwnerBias {
        &self.bias
    }

    /// Takes the lock: without a locked instruction on the owner thread while the bias
    /// holds, through the mutex on every thread after.
    #[inline]
    pub fn lock(&self) -> StateGuard<'_, T> {
        let mutex = if self.bias.enter(Slot::State) {
            None
        } else {
            Some(
                self.mutex
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            )
        };
        StateGuard { lock: self, mutex }
    }
}

/// The held state lock; dereferences to the value.
pub(crate) struct StateGuard<'a, T> {
    lock: &'a StateLock<T>,
    /// `None` in the owner's biased section. A `MutexGuard` field also keeps the guard on
    /// its thread (`!Send`) in both cases, as leaving the bias's slot must be.
    mutex: Option<MutexGuard<'a, ()>>,
}

impl<T> std::ops::Deref for StateGuard<'_, T> {
    type Target = T;

    #[inline]
    #[allow(unsafe_code)]
    fn deref(&self) -> &T {
        // SAFETY: the module's rule: this guard's thread holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for StateGuard<'_, T> {
    #[inline]
    #[allow(unsafe_code)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the module's rule: this guard's thread holds the lock, and `&mut self`
        // makes this the only reference through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for StateGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.mutex.is_none() {
            self.lock.bias.leave(Slot::State);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_reads_what_the_last_one_wrote_on_any_thread() {
        let lock = Arc::new(StateLock::new(Arc::new(OwnerBias::new(true)), Vec::new()));
        lock.lock().push(1);
        let other = lock.clone();
        std::thread::spawn(move || {
            let mut value = other.lock();
            assert_eq!(*value, [1], "the other thread sees the owner's write");
            value.push(2);
        })
        .join()
        .expect("the other thread");
        lock.lock().push(3);
        assert_eq!(*lock.lock(), [1, 2, 3]);
    }

    #[test]
    fn a_panic_inside_does_not_lock_anyone_out() {
        for wanted in [true, false] {
            let lock = Arc::new(StateLock::new(Arc::new(OwnerBias::new(wanted)), 0u32));
            let other = lock.clone();
            let panicked = std::thread::spawn(move || {
                let mut value = other.lock();
                *value = 7;
                panic!("inside the lock");
            })
            .join();
            assert!(panicked.is_err());
            assert_eq!(*lock.lock(), 7);
            *lock.lock() += 1;
            assert_eq!(*lock.lock(), 8);
        }
    }
}
