//! The owner bias: the first thread that uses a pool enters its locks without a locked
//! instruction, until another thread uses the pool; from then on every thread takes the
//! locks as usual.
//!
//! Most pools are used by one thread: a compute loop allocates and frees on the thread that
//! records its commands. On such a thread a mutex still costs a locked read-modify-write to
//! take and another to give back (17-19 ns together on the H100's host, call 48 in
//! docs/BENCHMARKS.md), and the reuse cache's flag one more (11 ns) each time a block parks
//! or the cache drains: about 40 ns per allocation and free, more than the engine's own
//! work on a decode trace. With the bias, the owner marks itself inside a lock with a plain
//! store and reads the bias's phase with a plain load.
//!
//! # Protocol
//!
//! - **Claim.** The first thread to enter, while no thread owns the bias, takes it
//!   (compare-exchange, once in the pool's life).
//! - **Owner.** To enter lock `slot`, the owner stores `inside[slot] = true`, issues the
//!   light side of the [asymmetric fence](crate::asymmetric_fence), and loads `phase`: if it
//!   reads [`ACTIVE`], it holds the lock; otherwise it clears `inside[slot]` and takes the
//!   lock's mutex or flag like any thread. Leaving clears `inside[slot]` (release).
//! - **Revocation.** Any other thread, before it takes a lock, revokes the bias once: it
//!   moves `phase` from [`ACTIVE`] to [`REVOKING`], issues the heavy side of the fence, waits
//!   until every `inside` flag reads `false` (acquire), and publishes [`REVOKED`] (release).
//!   Threads that find it [`REVOKING`] wait for [`REVOKED`]. The bias is never taken again.
//!
//! By the fence's guarantee, the owner either sees a phase other than [`ACTIVE`] and backs
//! off, or the revoking thread sees its `inside` flag and waits for it to clear: the owner's
//! biased section and the first mutex or flag section of any other thread never overlap,
//! and the owner's release of `inside` orders its writes before theirs. Once [`REVOKED`] is
//! published the owner fails its check too, so from then on every section is the lock's own.
//!
//! A bias without the heavy side of the fence ([`asymmetric_fence::available`] is `false`,
//! or the pool was made with the bias off) starts [`REVOKED`]: every thread takes the locks.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use crate::asymmetric_fence;

/// The owner enters without locked instructions.
const ACTIVE: u8 = 0;
/// A thread other than the owner is waiting for the owner to leave.
const REVOKING: u8 = 1;
/// Every thread takes the locks.
const REVOKED: u8 = 2;

/// No thread owns the bias yet.
const UNCLAIMED: u64 = 0;
/// The bias is revoked (or never held): no thread's id.
const NO_OWNER: u64 = u64::MAX;

/// The locks a bias covers: each has its own `inside` flag, so that the owner may hold
/// several at once (the pool's state lock, and under it the reuse cache's flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The pool's state lock.
    State = 0,
    /// The reuse cache's flag.
    Cache = 1,
}

const SLOTS: usize = 2;

/// Readies the owner bias of every pool this process will create, and returns whether the
/// bias is available here (Linux 4.14 or later, with `membarrier` allowed).
///
/// The bias needs the process registered once for `membarrier`; the first pool does that
/// otherwise. The kernel makes the registration wait for a grace period whenever the
/// process has more than one thread, which took 11 to 24 ms at the first pool's creation on
/// a 2-core machine, and microseconds while the process had a single thread.
/// [`create_instance`](crate::gpu::create_instance) (and so
/// [`GpuContext::headless`](crate::gpu::GpuContext::headless)) calls it before wgpu starts
/// any thread; an application that creates its own wgpu instance can call it first thing in
/// `main`. Calling it again costs a load.
///
/// ```
/// let available = wgpool::pool::prepare_owner_bias();
/// # let _ = available;
/// ```
pub fn prepare_owner_bias() -> bool {
    asymmetric_fence::available()
}

/// Whether [`prepare_owner_bias`] (or a pool) has registered the process already, for tests.
#[doc(hidden)]
pub fn owner_bias_prepared() -> bool {
    asymmetric_fence::asked()
}

pub(crate) struct OwnerBias {
    /// The owner's thread id; [`UNCLAIMED`] before the first entry, [`NO_OWNER`] once the
    /// bias is revoked or was never on.
    owner: AtomicU64,
    /// [`ACTIVE`], [`REVOKING`] or [`REVOKED`]; only ever moves forward.
    phase: AtomicU8,
    /// Whether the owner is inside each lock: written only by the owner thread.
    inside: [AtomicBool; SLOTS],
}

impl std::fmt::Debug for OwnerBias {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerBias")
            .field("held", &self.is_held())
            .finish()
    }
}

impl OwnerBias {
    /// A bias for the first thread to enter, where `wanted` and the process can revoke it;
    /// otherwise one that starts revoked.
    pub fn new(wanted: bool) -> OwnerBias {
        let on = wanted && asymmetric_fence::available();
        OwnerBias {
            owner: AtomicU64::new(if on { UNCLAIMED } else { NO_OWNER }),
            phase: AtomicU8::new(if on { ACTIVE } else { REVOKED }),
            inside: [AtomicBool::new(false), AtomicBool::new(false)],
        }
    }

    /// Whether some thread holds the bias, or can still claim it.
    pub fn is_held(&self) -> bool {
        self.phase.load(Ordering::Acquire) == ACTIVE
    }

    /// Enters `slot` as the owner: `true` if the calling thread owns the bias (or just
    /// claimed it) and the bias holds; the caller then holds the lock and must call
    /// [`leave`](Self::leave). `false` if the caller must take the lock's own mutex or flag:
    /// by then the bias is revoked, or (for the owner only) being revoked, so no biased
    /// section of another thread can overlap the caller's.
    #[inline]
    pub fn enter(&self, slot: Slot) -> bool {
        let owner = self.owner.load(Ordering::Relaxed);
        if owner == NO_OWNER {
            // Revoked or never on: no thread id needed.
            return false;
        }
        let me = thread_id();
        if owner == me {
            let inside = &self.inside[slot as usize];
            if inside.load(Ordering::Relaxed) {
                // With a mutex this would deadlock; here two sections would share the value.
                entered_twice(slot);
            }
            inside.store(true, Ordering::Relaxed);
            asymmetric_fence::light();
            if self.phase.load(Ordering::Relaxed) == ACTIVE {
                return true;
            }
            // Being revoked: take the lock's own mutex or flag. Other threads take none
            // before the revocation ends, and it may be waiting for this thread to leave
            // another slot, so the owner must not wait for it here.
            inside.store(false, Ordering::Release);
            return false;
        }
        self.claim_or_revoke(slot, me)
    }

    /// Leaves `slot` after a successful [`enter`](Self::enter).
    #[inline]
    pub fn leave(&self, slot: Slot) {
        self.inside[slot as usize].store(false, Ordering::Release);
    }

    /// The slow path of a thread that does not own the bias: claim it if nobody has, else
    /// revoke it.
    #[cold]
    fn claim_or_revoke(&self, slot: Slot, me: u64) -> bool {
        if self
            .owner
            .compare_exchange(UNCLAIMED, me, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return self.enter(slot);
        }
        self.revoke();
        false
    }

    /// Revokes the bias for good (see the module documentation); returns once no biased
    /// section can still run.
    #[cold]
    fn revoke(&self) {
        if self
            .phase
            .compare_exchange(ACTIVE, REVOKING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            self.wait_revoked();
            return;
        }
        if !asymmetric_fence::heavy() {
            // Registered at the bias's creation, the barrier cannot fail short of a kernel
            // that breaks its own ABI; without it no section of the owner's could be ruled
            // out, and continuing would risk two threads inside one lock.
            eprintln!("wgpool: membarrier failed after it was registered; aborting");
            std::process::abort();
        }
        for inside in &self.inside {
            let mut waits = 0u32;
            while inside.load(Ordering::Acquire) {
                back_off(&mut waits);
            }
        }
        self.owner.store(NO_OWNER, Ordering::Relaxed);
        self.phase.store(REVOKED, Ordering::Release);
    }

    #[cold]
    fn wait_revoked(&self) {
        let mut waits = 0u32;
        while self.phase.load(Ordering::Acquire) != REVOKED {
            back_off(&mut waits);
        }
    }
}

/// The owner entered a slot it holds: a bug in wgpool (its code never takes a lock it
/// holds), stopped here as loudly as the deadlock a mutex would give.
#[cold]
#[inline(never)]
fn entered_twice(slot: Slot) -> ! {
    panic!("wgpool: the pool's {slot:?} lock was entered twice by its owner thread")
}

/// Spins briefly, then yields, then sleeps: the owner may be inside a driver call.
fn back_off(waits: &mut u32) {
    *waits += 1;
    if *waits < 64 {
        std::hint::spin_loop();
    } else if *waits < 128 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// A number for the calling thread, never reused in the process (a thread-local's address
/// can be reused by a later thread); never [`UNCLAIMED`] or [`NO_OWNER`].
#[inline]
fn thread_id() -> u64 {
    thread_local! {
        static ID: Cell<u64> = const { Cell::new(UNCLAIMED) };
    }
    ID.with(|id| {
        let known = id.get();
        if known != UNCLAIMED {
            return known;
        }
        let new = next_thread_id();
        id.set(new);
        new
    })
}

#[cold]
fn next_thread_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    /// Whether this process has the heavy fence (Linux 4.14 and later, where no seccomp
    /// filter refuses `membarrier`). Where it has none, a bias never holds: the tests then
    /// check that instead of the protocol, and say so.
    fn fenced(bias: &OwnerBias) -> bool {
        if asymmetric_fence::available() {
            return true;
        }
        eprintln!("membarrier is unavailable here: the owner bias is off, its protocol untested");
        assert!(!bias.is_held(), "no fence, no bias");
        assert!(!bias.enter(Slot::State), "every thread takes the mutex");
        false
    }

    #[test]
    fn the_first_thread_owns_the_bias_until_another_enters() {
        let bias = Arc::new(OwnerBias::new(true));
        if !fenced(&bias) {
            return;
        }
        assert!(bias.enter(Slot::State), "the first entry claims the bias");
        assert!(bias.enter(Slot::Cache), "the owner may hold both slots");
        bias.leave(Slot::Cache);
        bias.leave(Slot::State);
        assert!(bias.enter(Slot::State));
        bias.leave(Slot::State);
        let other = bias.clone();
        let entered = std::thread::spawn(move || other.enter(Slot::State))
            .join()
            .expect("the other thread");
        assert!(!entered, "another thread takes the lock itself");
        assert!(!bias.is_held(), "and the bias is gone");
        assert!(!bias.enter(Slot::State), "for the owner too");
    }

    #[test]
    fn the_owner_entering_a_slot_it_holds_is_stopped() {
        let bias = OwnerBias::new(true);
        if !fenced(&bias) {
            return;
        }
        assert!(bias.enter(Slot::State));
        let twice = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            bias.enter(Slot::State);
        }));
        let message = twice.expect_err("a second entry panics");
        let text = message.downcast_ref::<String>().map(String::as_str);
        assert!(
            text.is_some_and(|t| t.contains("entered twice")),
            "{text:?}"
        );
    }

    #[test]
    fn a_bias_that_is_not_wanted_never_holds() {
        let bias = OwnerBias::new(false);
        assert!(!bias.enter(Slot::State));
        assert!(!bias.enter(Slot::Cache));
        assert!(!bias.is_held());
    }

    #[test]
    fn revoking_waits_for_the_owner_to_leave() {
        let bias = Arc::new(OwnerBias::new(true));
        if !fenced(&bias) {
            return;
        }
        assert!(bias.enter(Slot::State));
        let other = bias.clone();
        let started = Arc::new(Barrier::new(2));
        let go = started.clone();
        let revoker = std::thread::spawn(move || {
            go.wait();
            let entered = other.enter(Slot::State);
            (entered, other.phase.load(Ordering::Acquire))
        });
        started.wait();
        let waited = std::time::Instant::now();
        while bias.phase.load(Ordering::Acquire) == ACTIVE {
            assert!(
                waited.elapsed().as_secs() < 60,
                "the other thread never started revoking"
            );
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!revoker.is_finished(), "the revoker waits for the owner");
        assert!(
            !bias.enter(Slot::Cache),
            "the owner's next lock backs off to the lock's own mutex or flag"
        );
        assert_eq!(
            bias.phase.load(Ordering::Acquire),
            REVOKING,
            "the revoker waits while the owner is inside"
        );
        bias.leave(Slot::State);
        let (entered, phase) = revoker.join().expect("the revoker");
        assert!(!entered);
        assert_eq!(phase, REVOKED);
    }

    /// Two threads add to one unsynchronized counter under a lock made of the bias and a
    /// mutex, as the pool's state lock is: every increment must count, across the
    /// revocation that happens while the owner is busy.
    #[test]
    fn owner_and_others_never_overlap() {
        struct Counter {
            bias: OwnerBias,
            mutex: std::sync::Mutex<()>,
            value: std::cell::UnsafeCell<u64>,
        }
        // SAFETY (test): `value` is reached only under the bias or the mutex.
        #[allow(unsafe_code)]
        unsafe impl Sync for Counter {}
        #[allow(unsafe_code)]
        fn add(counter: &Counter) {
            if counter.bias.enter(Slot::State) {
                // SAFETY: the owner's biased section.
                unsafe { *counter.value.get() += 1 };
                counter.bias.leave(Slot::State);
            } else {
                let _guard = counter.mutex.lock().expect("not poisoned");
                // SAFETY: the mutex, after the bias is revoked.
                unsafe { *counter.value.get() += 1 };
            }
        }
        const EACH: u64 = 200_000;
        let counter = Arc::new(Counter {
            bias: OwnerBias::new(true),
            mutex: std::sync::Mutex::new(()),
            value: std::cell::UnsafeCell::new(0),
        });
        add(&counter);
        // Without the fence the bias is off and every add takes the mutex.
        assert_eq!(counter.bias.is_held(), asymmetric_fence::available());
        let mut threads = Vec::new();
        for _ in 0..3 {
            let counter = counter.clone();
            threads.push(std::thread::spawn(move || {
                for _ in 0..EACH {
                    add(&counter);
                }
            }));
        }
        for _ in 0..EACH {
            add(&counter);
        }
        for thread in threads {
            thread.join().expect("an adder");
        }
        #[allow(unsafe_code)]
        // SAFETY: every adder has joined.
        let total = unsafe { *counter.value.get() };
        assert_eq!(total, 4 * EACH + 1);
        assert!(!counter.bias.is_held());
    }
}
