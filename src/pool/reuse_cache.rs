//! The reuse cache: a just-dropped block serves the next request of exactly the same size
//! without going through the engine (like glibc's per-thread cache, but one per pool).
//!
//! Guarantees:
//! - a block is reused only for a request of the same byte size, so every statistic the
//!   engine keeps (allocated, active, requested, their peaks and totals) comes out exactly as
//!   if the block had been freed and allocated through the engine;
//! - the engine never decides with blocks held here: every engine operation (an allocation
//!   that misses, `empty_cache`, statistics, snapshots) first returns them to the engine;
//! - it holds at most [`CAPACITY`] blocks.
//!
//! It is guarded by a spin flag rather than a mutex: operations under it are a few loads and
//! stores, and a thread that finds it busy takes the engine's path instead of waiting.

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::block::BlockParts;
use super::shared::PoolShared;

/// A parked block with the pool reference its handle held, so that parking and reuse move
/// the reference instead of counting it down and up again.
pub(crate) type Parked = (Arc<PoolShared>, Box<BlockParts>);

/// Most blocks the cache holds.
pub const CAPACITY: usize = 32;

/// Statistics of blocks that went out of and back into the cache without the engine seeing
/// it: each reuse is one free and one allocation of the same block.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReuseCounts {
    /// Per pool (small, large): reuses, their block bytes, their requested bytes.
    pub reuses: [u64; 2],
    pub bytes: [u64; 2],
    pub requested: [u64; 2],
    /// Reuses of blocks of at least `max_split_size` (PyTorch's oversize allocations).
    pub oversize: u64,
}

struct Contents {
    parked: Vec<Parked>,
    counts: ReuseCounts,
}

pub(crate) struct ReuseCache {
    busy: AtomicBool,
    oversize_from: u64,
    contents: UnsafeCell<Contents>,
}

// SAFETY: `contents` is only reached through `ReuseCache::try_with`/`with`, which hold the
// `busy` flag (acquire on taking, release on giving back), so at most one thread touches it
// at a time. `BlockParts` is `Send`.
unsafe impl Sync for ReuseCache {}

impl ReuseCache {
    /// A cache that counts reuses of blocks of `oversize_from` bytes or more as oversize.
    pub fn new(oversize_from: u64) -> ReuseCache {
        ReuseCache {
            busy: AtomicBool::new(false),
            oversize_from,
            contents: UnsafeCell::new(Contents {
                parked: Vec::with_capacity(CAPACITY),
                counts: ReuseCounts::default(),
            }),
        }
    }

    #[inline]
    fn try_with<R>(&self, work: impl FnOnce(&mut Contents) -> R) -> Option<R> {
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        // SAFETY: the flag is ours until the release store below.
        let result = work(unsafe { &mut *self.contents.get() });
        self.busy.store(false, Ordering::Release);
        Some(result)
    }

    fn with<R>(&self, mut work: impl FnMut(&mut Contents) -> R) -> R {
        loop {
            if let Some(result) = self.try_with(&mut work) {
                return result;
            }
            std::hint::spin_loop();
        }
    }

    /// A parked block of exactly `size` requested bytes, most recently parked first; counted
    /// as a reuse.
    #[inline]
    pub fn take(&self, size: u64) -> Option<Parked> {
        self.try_with(|c| {
            let index = c.parked.iter().rposition(|p| p.1.size == size)?;
            let parked = c.parked.swap_remove(index);
            let parts = &parked.1;
            let pool = parts.kind.index();
            c.counts.reuses[pool] += 1;
            c.counts.bytes[pool] += parts.capacity;
            c.counts.requested[pool] += parts.size;
            c.counts.oversize += u64::from(parts.capacity >= self.oversize_from);
            Some(parked)
        })
        .flatten()
    }

    /// Parks a dropped block, or hands it back when the cache is full or busy, or when
    /// `open` reads zero: the pool's last handle is gone, and a parked block would keep the
    /// pool alive with nobody left to reuse it.
    #[inline]
    pub fn park(&self, parked: Parked, open: &AtomicUsize) -> Result<(), Parked> {
        let mut parked = Some(parked);
        self.try_with(|c| {
            // Read under the flag: `Pool`'s drop counts its handle down before it drains.
            if c.parked.len() < CAPACITY && open.load(Ordering::Acquire) > 0 {
                c.parked.extend(parked.take());
            }
        });
        parked.map_or(Ok(()), Err)
    }

    /// Empties the cache: the parked blocks (to free through the engine) and the reuse counts
    /// since the last drain.
    pub fn drain(&self) -> (Vec<Parked>, ReuseCounts) {
        self.with(|c| (c.parked.drain(..).collect(), std::mem::take(&mut c.counts)))
    }
}
