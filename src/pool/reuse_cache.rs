//! The reuse cache: a just-dropped block serves the next request of exactly the same size
//! without going through the engine (like glibc's per-thread cache, but one per pool).
//!
//! Guarantees:
//! - a block is reused only for a request of the same byte size, so every statistic the
//!   engine keeps (allocated, active, requested, their peaks and totals) comes out exactly as
//!   if the block had been freed and allocated through the engine;
//! - the engine never decides with blocks held here: every engine operation (an allocation
//!   that misses, `empty_cache`, statistics, snapshots) first returns them to the engine;
//! - it holds at most [`CAPACITY`] blocks, and each parked block comes out exactly once
//!   (taken, or drained);
//! - it never keeps its pool alive after the pool's last handle is gone.
//!
//! It does not promise the engine's placement: a hit hands back the block where it was, where
//! the engine would first merge it with its free neighbours and place the request by its
//! policy, so a pool with the cache can hold more or less memory than its engine alone (the
//! `reuse_cache` option turns it off; `policy:pytorch` has it off by default).
//!
//! It is guarded by a spin flag rather than a mutex: operations under it are a few loads and
//! stores, and a thread that finds it busy takes the engine's path instead of waiting. The
//! pool's owner thread holds it without the flag while the pool's owner bias holds.
//!
//! # The two `unsafe` rules
//!
//! 1. **The flag owns the contents.** `contents` is reached only inside
//!    [`ReuseCache::try_with`], between taking the `busy` flag (acquire) and giving it back
//!    (release), or, on the pool's owner thread while its
//!    [owner bias](super::owner_bias) holds, between entering the bias's cache slot and
//!    leaving it (the bias's protocol keeps every other thread off the flag until then), so
//!    at most one thread touches it at a time.
//! 2. **A parked reference keeps its owner alive, and parking never drops one.** A block
//!    parks together with the reference to its pool (`Arc<O>`) that its handle held, so that
//!    reuse moves that reference instead of counting it down and up again. The cache lives
//!    inside the pool it refers to, so [`park`] must reach the cache through a raw pointer
//!    while it moves the reference in: the reference is the only thing keeping the cache's
//!    memory alive. That is sound because [`park`] either stores the reference inside that
//!    same memory (which then cannot be freed: the stored reference holds it) or hands it
//!    back to its caller; no path drops it inside the call. The cycle this makes (owner →
//!    cache → reference → owner) is broken by [`ReuseCache::drain`], which runs through a
//!    reference of its own (a `Pool` handle), and the cache refuses to park once the owner's
//!    last handle is gone, so no cycle outlives the pool. The unit tests below check both:
//!    a refused park returns the last reference alive, and draining hands each parked
//!    reference to its caller exactly once, so the owner is dropped exactly once. (The
//!    pool banks what a drain hands it while a handle is open, a cycle of the same kind,
//!    broken when the last handle releases the bank: see `reference_bank`.)

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::owner_bias::{OwnerBias, Slot};
use crate::engine::SegmentKind;

/// Most blocks the cache holds.
pub const CAPACITY: usize = 32;

/// What the cache needs to know of a parked block.
pub(crate) trait Reusable {
    /// The bytes the block's user asked for: it is reused only for that exact size.
    fn requested(&self) -> u64;
    /// The bytes the block spans.
    fn block_size(&self) -> u64;
    /// The kind of segment it lives in (small or large).
    fn kind(&self) -> SegmentKind;
}

/// What owns a cache: it reaches its own cache and counts its open handles.
pub(crate) trait CacheOwner {
    /// The parked block records.
    type Parts: Reusable;
    /// The cache inside the owner.
    fn cache(&self) -> &ReuseCache<Self, Self::Parts>
    where
        Self: Sized;
    /// Handles that may still take blocks out of the cache; parking stops at zero.
    fn open_handles(&self) -> &AtomicUsize;
}

/// A parked block with the owner reference its handle held.
pub(crate) type Parked<O, P> = (Arc<O>, Box<P>);

/// Statistics of blocks that went out of and back into the cache without the engine seeing
/// it: each reuse is one free and one allocation of the same block.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReuseCounts {
    /// Per segment kind (small, large): reuses, their block bytes, their requested bytes.
    pub reuses: [u64; 2],
    pub bytes: [u64; 2],
    pub requested: [u64; 2],
    /// Reuses of blocks of at least `max_split_size` (PyTorch's oversize allocations).
    pub oversize: u64,
}

struct Contents<O, P> {
    parked: Vec<Parked<O, P>>,
    counts: ReuseCounts,
    /// Whether a block was taken since the last drain (`counts` is not all zero): one flag
    /// to test instead of the counts.
    counted: bool,
}

pub(crate) struct ReuseCache<O, P> {
    /// The pool's owner bias: its owner thread holds the cache without taking `busy`.
    bias: Arc<OwnerBias>,
    busy: AtomicBool,
    /// Whether the cache holds blocks or reuse counts, as of the last operation under the
    /// flag: read without the flag, to skip taking it when there is nothing to take or
    /// drain. A stale `false` only sends a request to the engine that a block parked just
    /// then could have served, as a busy flag does.
    occupied: AtomicBool,
    /// One bit per size parked since the last drain (a hash of the requested bytes), written
    /// only under the flag: read without it, so that a request of a size nobody parked goes
    /// to the engine without taking the flag. Bits of blocks taken stay until the drain, and
    /// sizes may share a bit: either costs only the flag, as before. A stale read only sends
    /// a request to the engine that a block parked just then could have served, as a stale
    /// `occupied` does.
    sizes: AtomicU64,
    /// Whether the cache held [`CAPACITY`] blocks after the last operation under the flag:
    /// read without it, by a thread whose block the full cache refused, to return the whole
    /// cache to the engine with its block in one go. A stale read only changes which of
    /// the two ways a refused block takes.
    full: AtomicBool,
    oversize_from: u64,
    contents: UnsafeCell<Contents<O, P>>,
}

// SAFETY: rule 1 of the module documentation: `contents` is only reached under the `busy`
// flag, so sharing the cache between threads shares no unsynchronized access. What it holds
// moves between threads, hence the bounds.
#[allow(unsafe_code)]
unsafe impl<O: Send + Sync, P: Send> Sync for ReuseCache<O, P> {}

impl<O, P: Reusable> ReuseCache<O, P> {
    /// A cache that counts reuses of blocks of `oversize_from` bytes or more as oversize.
    /// The owner thread of `bias` holds it without the flag while the bias holds.
    pub fn new(oversize_from: u64, bias: Arc<OwnerBias>) -> Self {
        ReuseCache {
            bias,
            busy: AtomicBool::new(false),
            occupied: AtomicBool::new(false),
            sizes: AtomicU64::new(0),
            full: AtomicBool::new(false),
            oversize_from,
            contents: UnsafeCell::new(Contents {
                parked: Vec::with_capacity(CAPACITY),
                counts: ReuseCounts::default(),
                counted: false,
            }),
        }
    }

    /// Runs `work` on the contents if the flag is free; `None` if another thread holds it.
    #[inline]
    #[allow(unsafe_code)]
    fn try_with<R>(&self, work: impl FnOnce(&mut Contents<O, P>) -> R) -> Option<R> {
        let biased = self.bias.enter(Slot::Cache);
        if !biased
            && self
                .busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        // SAFETY: rule 1: the cache is ours (by the bias, or by the flag) until the bias's
        // slot or the flag is given back below, and `work` cannot reach this cache again (it
        // gets only the contents).
        let contents = unsafe { &mut *self.contents.get() };
        let result = work(contents);
        let occupied = !contents.parked.is_empty() || contents.counted;
        self.occupied.store(occupied, Ordering::Relaxed);
        self.full
            .store(contents.parked.len() >= CAPACITY, Ordering::Relaxed);
        if biased {
            self.bias.leave(Slot::Cache);
        } else {
            self.busy.store(false, Ordering::Release);
        }
        Some(result)
    }

    fn with<R>(&self, work: impl FnOnce(&mut Contents<O, P>) -> R) -> R {
        let mut work = Some(work);
        loop {
            if let Some(result) = self.try_with(|contents| work.take().map(|w| w(contents))) {
                return result.expect("the work runs once, when the flag is taken");
            }
            std::hint::spin_loop();
        }
    }

    /// Whether the cache was full after its last operation (see the field).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }

    /// A parked block of exactly `size` requested bytes, most recently parked first; counted
    /// as a reuse. `None` when there is none, or when another thread holds the cache.
    #[inline]
    pub fn take(&self, size: u64) -> Option<Parked<O, P>> {
        if self.sizes.load(Ordering::Relaxed) & size_bit(size) == 0 {
            return None;
        }
        self.try_with(|c| {
            let index = c.parked.iter().rposition(|p| p.1.requested() == size)?;
            let parked = c.parked.swap_remove(index);
            let parts = &parked.1;
            let kind = parts.kind().index();
            c.counted = true;
            c.counts.reuses[kind] += 1;
            c.counts.bytes[kind] += parts.block_size();
            c.counts.requested[kind] += parts.requested();
            c.counts.oversize += u64::from(parts.block_size() >= self.oversize_from);
            Some(parked)
        })
        .flatten()
    }

    /// Parks a dropped block, or hands it back when the cache is full or busy, or when
    /// `open` reads zero: the owner's last handle is gone, and a parked block would keep the
    /// owner alive with nobody left to reuse it. Never drops `parked` (rule 2).
    #[inline]
    fn park_in(&self, parked: Parked<O, P>, open: &AtomicUsize) -> Result<(), Parked<O, P>> {
        let mut parked = Some(parked);
        self.try_with(|c| {
            // Read under the flag: the owner counts its last handle down before it drains.
            if c.parked.len() < CAPACITY
                && open.load(Ordering::Acquire) > 0
                && let Some(parked) = parked.take()
            {
                // Only this thread writes it, under the flag: no read-modify-write needed.
                let bits = self.sizes.load(Ordering::Relaxed) | size_bit(parked.1.requested());
                self.sizes.store(bits, Ordering::Relaxed);
                c.parked.push(parked);
            }
        });
        parked.map_or(Ok(()), Err)
    }

    /// Empties the cache: hands each parked record, with the owner reference it parked
    /// with, to `free` (to free its block through the engine, and keep or drop the record
    /// and the reference), in the order they were parked, and returns the reuse counts since
    /// the last drain (`None` when no block was taken since). The caller must reach the
    /// cache through a reference of its own, not one of the parked ones (rule 2), so
    /// dropping the parked references never drops the owner under it. `free` runs under
    /// the cache's flag (or the owner bias's cache slot) and must not reach the cache; other
    /// threads meanwhile neither park nor take (they go to the engine instead).
    pub fn drain(&self, mut free: impl FnMut(Arc<O>, Box<P>)) -> Option<ReuseCounts> {
        if !self.occupied.load(Ordering::Relaxed) {
            // Nothing parked and nothing counted: a block parked from now on is parked
            // after this drain.
            return None;
        }
        self.with(|c| {
            self.sizes.store(0, Ordering::Relaxed);
            if c.parked.len() == 1 {
                // The common case where sizes keep changing (a decode's growing caches):
                // one block parked since the last miss. `pop` keeps the vector's storage
                // without a drain iterator's bookkeeping.
                if let Some((reference, parts)) = c.parked.pop() {
                    free(reference, parts);
                }
            } else {
                for (reference, parts) in c.parked.drain(..) {
                    free(reference, parts);
                }
            }
            if c.counted {
                c.counted = false;
                Some(std::mem::take(&mut c.counts))
            } else {
                None
            }
        })
    }
}

/// The bit of `size` in [`ReuseCache::sizes`]: one of 64, by a multiplicative hash.
#[inline]
fn size_bit(size: u64) -> u64 {
    1 << (size.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58)
}

/// Parks a dropped block with its owner reference in the owner's own cache, or hands both
/// back (cache full or busy, or the owner's last handle gone).
#[inline]
#[allow(unsafe_code)]
pub(crate) fn park<O: CacheOwner>(
    owner: Arc<O>,
    parts: Box<O::Parts>,
) -> Result<(), Parked<O, O::Parts>> {
    let this: *const O = Arc::as_ptr(&owner);
    // SAFETY: rule 2: `owner` keeps the allocation behind `this` alive, and `park_in` either
    // stores `owner` inside that allocation or returns it; it never drops it, so the
    // allocation outlives every use of `this` in this call.
    let this = unsafe { &*this };
    this.cache().park_in((owner, parts), this.open_handles())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU64;

    use super::*;

    /// A block record that counts its drops.
    struct FakeParts {
        id: u64,
        requested: u64,
        drops: Arc<AtomicU64>,
    }

    impl Reusable for FakeParts {
        fn requested(&self) -> u64 {
            self.requested
        }
        fn block_size(&self) -> u64 {
            self.requested.div_ceil(512) * 512
        }
        fn kind(&self) -> SegmentKind {
            SegmentKind::Small
        }
    }

    impl Drop for FakeParts {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// An owner with a cache inside it, as `PoolShared` is, that counts its own drops.
    struct Owner {
        cache: ReuseCache<Owner, FakeParts>,
        handles: AtomicUsize,
        drops: Arc<AtomicU64>,
    }

    impl CacheOwner for Owner {
        type Parts = FakeParts;
        fn cache(&self) -> &ReuseCache<Owner, FakeParts> {
            &self.cache
        }
        fn open_handles(&self) -> &AtomicUsize {
            &self.handles
        }
    }

    impl Drop for Owner {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn owner() -> (Arc<Owner>, Arc<AtomicU64>) {
        let drops = Arc::new(AtomicU64::new(0));
        let owner = Arc::new(Owner {
            cache: ReuseCache::new(u64::MAX, Arc::new(OwnerBias::new(true))),
            handles: AtomicUsize::new(1),
            drops: drops.clone(),
        });
        (owner, drops)
    }

    fn parts(id: u64, requested: u64, drops: &Arc<AtomicU64>) -> Box<FakeParts> {
        Box::new(FakeParts {
            id,
            requested,
            drops: drops.clone(),
        })
    }

    #[test]
    fn a_refused_park_hands_back_the_last_reference_alive() {
        let (owner, owner_drops) = owner();
        let part_drops = Arc::new(AtomicU64::new(0));
        // The last handle is gone: parking must refuse, returning the only reference.
        owner.handles.store(0, Ordering::SeqCst);
        let weak = Arc::downgrade(&owner);
        let refused = park(owner, parts(1, 100, &part_drops));
        let Err((back, item)) = refused else {
            panic!("parking after the last handle must be refused")
        };
        assert_eq!(
            owner_drops.load(Ordering::SeqCst),
            0,
            "the owner outlived the call"
        );
        assert_eq!(Arc::strong_count(&back), 1);
        assert_eq!(item.id, 1);
        drop((back, item));
        assert_eq!(owner_drops.load(Ordering::SeqCst), 1);
        assert_eq!(part_drops.load(Ordering::SeqCst), 1);
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn a_full_cache_refuses_and_draining_hands_each_reference_back_once() {
        let (owner, owner_drops) = owner();
        let part_drops = Arc::new(AtomicU64::new(0));
        for id in 0..CAPACITY as u64 {
            assert!(!owner.cache.is_full());
            assert!(park(owner.clone(), parts(id, 512, &part_drops)).is_ok());
        }
        assert!(owner.cache.is_full());
        assert_eq!(Arc::strong_count(&owner), CAPACITY + 1);
        let Err((back, item)) = park(owner.clone(), parts(99, 512, &part_drops)) else {
            panic!("a full cache refuses")
        };
        assert_eq!(item.id, 99);
        drop((back, item));
        // The owner's last handle goes: count it down, then drain through our own reference.
        owner.handles.store(0, Ordering::SeqCst);
        let mut records = Vec::new();
        let mut references = Vec::new();
        let counts = owner.cache.drain(|reference, parts| {
            references.push(reference);
            records.push(parts);
        });
        assert_eq!(counts, None, "nothing was reused");
        assert_eq!(
            records.iter().map(|r| r.id).collect::<Vec<_>>(),
            (0..CAPACITY as u64).collect::<Vec<_>>(),
            "each block once, in the order parked"
        );
        assert_eq!(
            part_drops.load(Ordering::SeqCst),
            1,
            "only the refused record was dropped: the parked ones went to the caller"
        );
        assert_eq!(references.len(), CAPACITY, "each parked reference once");
        assert!(!owner.cache.is_full(), "a drained cache is empty");
        assert_eq!(Arc::strong_count(&owner), CAPACITY + 1, "none was dropped");
        drop((references, records));
        assert_eq!(Arc::strong_count(&owner), 1);
        assert_eq!(part_drops.load(Ordering::SeqCst), CAPACITY as u64 + 1);
        assert_eq!(owner_drops.load(Ordering::SeqCst), 0);
        drop(owner);
        assert_eq!(
            owner_drops.load(Ordering::SeqCst),
            1,
            "the owner is dropped exactly once"
        );
    }

    #[test]
    fn take_serves_the_exact_size_most_recent_first_and_counts_reuses() {
        let (owner, _) = owner();
        let part_drops = Arc::new(AtomicU64::new(0));
        for (id, size) in [(1, 100), (2, 700), (3, 100)] {
            assert!(park(owner.clone(), parts(id, size, &part_drops)).is_ok());
        }
        assert!(owner.cache.take(101).is_none());
        let (_, first) = owner.cache.take(100).expect("a 100-byte block");
        let (_, second) = owner.cache.take(100).expect("another one");
        assert_eq!((first.id, second.id), (3, 1));
        assert!(owner.cache.take(100).is_none());
        let mut rest = Vec::new();
        let counts = owner
            .cache
            .drain(|_, record| rest.push(record.id))
            .expect("blocks were reused");
        assert_eq!(rest, vec![2]);
        assert_eq!(counts.reuses, [2, 0]);
        assert_eq!(counts.bytes, [1024, 0]);
        assert_eq!(counts.requested, [200, 0]);
        assert_eq!(
            owner.cache.drain(|_, _| {}),
            None,
            "a drain resets the counts"
        );
    }

    #[test]
    fn concurrent_park_and_take_never_hand_out_a_block_twice_or_lose_one() {
        let (owner, owner_drops) = owner();
        let part_drops = Arc::new(AtomicU64::new(0));
        let out = Arc::new(Mutex::new(HashSet::new()));
        let threads = 8u64;
        let per_thread = 20_000u64;
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let owner = owner.clone();
                let part_drops = part_drops.clone();
                let out = out.clone();
                std::thread::spawn(move || {
                    let mut held: Vec<Box<FakeParts>> = Vec::new();
                    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                    let (mut made, mut returned) = (0u64, 0u64);
                    for step in 0..per_thread {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        let size = 512 * (1 + state % 4);
                        if state % 3 == 0 || held.is_empty() {
                            // Take one of the size, or make a new one.
                            let item = match owner.cache.take(size) {
                                Some((reference, item)) => {
                                    drop(reference);
                                    item
                                }
                                None => {
                                    made += 1;
                                    parts(t << 32 | step, size, &part_drops)
                                }
                            };
                            assert!(
                                out.lock().unwrap().insert(item.id),
                                "block {} handed out twice",
                                item.id
                            );
                            held.push(item);
                        } else {
                            let item = held.swap_remove((state % held.len() as u64) as usize);
                            assert!(out.lock().unwrap().remove(&item.id));
                            match park(owner.clone(), item) {
                                Ok(()) => {}
                                Err((reference, item)) => {
                                    drop(reference);
                                    returned += 1;
                                    drop(item);
                                }
                            }
                        }
                    }
                    for item in held.drain(..) {
                        assert!(out.lock().unwrap().remove(&item.id));
                        returned += 1;
                    }
                    (made, returned)
                })
            })
            .collect();
        let (mut made, mut returned) = (0, 0);
        for worker in workers {
            let (m, r) = worker.join().expect("no worker panics");
            made += m;
            returned += r;
        }
        let mut parked = 0u64;
        owner.cache.drain(|_, _| parked += 1);
        assert_eq!(
            made,
            returned + parked,
            "every block made is returned or still parked"
        );
        assert!(out.lock().unwrap().is_empty());
        assert_eq!(
            Arc::strong_count(&owner),
            1,
            "no parked reference is left behind"
        );
        assert_eq!(
            part_drops.load(Ordering::SeqCst),
            made,
            "each block dropped exactly once"
        );
        drop(owner);
        assert_eq!(owner_drops.load(Ordering::SeqCst), 1);
    }
}
