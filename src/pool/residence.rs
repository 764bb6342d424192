//! [`Residence`]: what a pool with residency knows of one block that may be evicted, shared
//! between the block's handle (or the references that outlive it) and the pool.
//!
//! # Why a use never meets an eviction halfway
//!
//! An eviction copies the block out and unmaps its pages, so no recorded command may name
//! the block then, and none of the pool's own transfers may be reaching it. Users announce
//! themselves without the pool's lock, and the evicting thread (which holds the lock) checks
//! for them, in the same pattern on both sides:
//!
//! - a use first publishes itself (a ticket in [`tickets`](Residence::tickets) for a
//!   recording, a count in [`busy`](Residence::busy) for a transfer, or a pin), then reads
//!   [`evicting`](Residence::evicting); set, it takes the lock, which the evicting thread
//!   holds until it is done, and restores the block;
//! - an eviction first sets `evicting`, then reads the uses; any use found clears the flag
//!   again and leaves the block alone.
//!
//! Every one of these accesses is sequentially consistent, so at least one side sees the
//! other: either the eviction sees the use and backs off, or the use sees the flag and waits
//! for the restore.

use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::recordings::OpenTickets;
use crate::engine::BlockId;

/// A tracked block (see the module documentation).
pub(crate) struct Residence {
    /// The block's engine id.
    pub id: BlockId,
    /// The wrapper the block is reached through: the pool's copies go through it, so that
    /// wgpu orders them with the application's work on the block.
    pub buffer: wgpu::Buffer,
    /// The whole pages inside the block, as offsets in `buffer`: what eviction copies out and
    /// unmaps.
    pub run: Range<u64>,
    /// The recordings that used the block (through its handle or a reference).
    pub tickets: Tickets,
    /// When the block was last used, on the pool's use clock.
    pub last_use: AtomicU64,
    /// Pins by the application ([`Pool::pin`](super::Pool::pin)).
    pub pins: AtomicU32,
    /// The pool's own transfers reaching the block now.
    pub busy: AtomicU32,
    /// Set while the block is evicted or an eviction decides about it.
    pub evicting: AtomicBool,
    /// Set once the block was evicted: the pool's copies reached its bytes, so freeing it
    /// counts as freeing transferred bytes.
    pub moved: AtomicBool,
    /// Declared read-only by the application ([`Pool::set_read_only`](super::Pool::set_read_only)):
    /// the host copy a restore read from stays current, so it is kept, and evicting the
    /// block again copies nothing. Changed only under the pool's lock.
    pub read_only: AtomicBool,
    /// Its contents were discarded ([`Pool::discard`](super::Pool::discard)) and it has not
    /// been used since: an eviction copies nothing out. Set under the pool's lock; cleared
    /// by the next use.
    pub discarded: AtomicBool,
}

impl Residence {
    /// A block at `run` of `buffer`, used now.
    pub fn new(id: BlockId, buffer: wgpu::Buffer, run: Range<u64>, now: u64) -> Residence {
        Residence {
            id,
            buffer,
            run,
            tickets: Tickets::default(),
            last_use: AtomicU64::new(now),
            pins: AtomicU32::new(0),
            busy: AtomicU32::new(0),
            evicting: AtomicBool::new(false),
            moved: AtomicBool::new(false),
            read_only: AtomicBool::new(false),
            discarded: AtomicBool::new(false),
        }
    }

    /// The bytes an eviction gives back.
    pub fn bytes(&self) -> u64 {
        self.run.end - self.run.start
    }

    /// Notes a use at tick `now` of the use clock.
    #[inline]
    pub fn touch(&self, now: u64) {
        self.last_use.fetch_max(now, Ordering::Relaxed);
    }

    /// Whether the block is evicted (or an eviction is deciding about it): read after a use
    /// was published, see the module documentation.
    #[inline]
    pub fn evicting(&self) -> bool {
        self.evicting.load(Ordering::SeqCst)
    }

    /// Notes a use: the block's contents matter again, so a discard no longer applies.
    #[inline]
    pub fn clear_discard(&self) {
        if self.discarded.load(Ordering::Relaxed) {
            self.discarded.store(false, Ordering::SeqCst);
        }
    }

    /// Whether the block is read-only (see [`read_only`](Residence::read_only)).
    #[inline]
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::SeqCst)
    }

    /// Whether a pin or one of the pool's transfers holds the block on the device. Read by
    /// an eviction after it set `evicting`.
    pub fn held(&self) -> bool {
        self.pins.load(Ordering::SeqCst) > 0 || self.busy.load(Ordering::SeqCst) > 0
    }
}

/// The tickets of the recordings that used a block, exactly: unlike a block's
/// [`ExposureSpan`](super::recordings::ExposureSpan), whose first-to-last range would take in
/// every recording other threads opened meanwhile, so that a block used now and then on
/// one thread would always seem in use while any thread records.
#[derive(Debug, Default)]
pub(crate) struct Tickets {
    /// The ticket added last: adding it again takes no lock.
    last: AtomicU64,
    list: Mutex<Vec<u64>>,
}

impl Tickets {
    /// Adds recording `ticket`.
    #[inline]
    pub fn include(&self, ticket: u64) {
        if self.last.load(Ordering::SeqCst) == ticket {
            return;
        }
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if !list.contains(&ticket) {
            list.push(ticket);
        }
        self.last.store(ticket, Ordering::SeqCst);
    }

    /// Whether a recording that may still be open (see [`OpenTickets::may_be_open`]) used
    /// the block; forgets the ones closed for sure.
    pub fn any_open(&self, open: &OpenTickets) -> bool {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|&ticket| open.may_be_open(ticket));
        !list.is_empty()
    }
}

/// Every tracked block's use clock: ticks once per use.
#[derive(Debug, Default)]
pub(crate) struct UseClock(AtomicU64);

impl UseClock {
    /// The next tick.
    #[inline]
    pub fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed) + 1
    }
}
