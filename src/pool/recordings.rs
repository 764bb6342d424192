//! Recordings: which command recordings may still name a block, and when they end.
//!
//! wgpu runs work in submission order, but commands are recorded before they are submitted,
//! on any thread. A dropped block's memory may serve a new request only once every recording
//! that may name the block has been submitted; otherwise work for the new owner (a write, a
//! kernel in another encoder) could be submitted first and change what the recorded commands
//! read.
//!
//! This module is the pure core of that rule; it knows nothing of wgpu:
//!
//! - A **recording** is the span of one thread's commands between two submission points. It
//!   opens when the thread first exposes a block (takes a binding, operand, slice or buffer,
//!   or records a bind group built through the pool) and closes at the thread's next
//!   submission point, when it is handed over as a [`Recording`](super::Recording) token and
//!   that token is dropped, or when every recording is closed at once.
//! - Each recording gets a **ticket** when it opens: tickets only grow, so a recording that
//!   opens later has a larger ticket than every recording open or closed before it.
//! - Each block keeps the [`ExposureSpan`] of tickets of the recordings that exposed it.
//!   Memory may be reused only when no open recording has a ticket inside that span.
//!
//! Guarantees, each tested below:
//! - a block exposed by a recording is never reported free while that recording is open,
//!   whichever thread closes which recording;
//! - a block never exposed is always free;
//! - closing every recording frees every block, and a thread that exposes a block after that
//!   opens a new recording.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// No open recording.
const NONE_OPEN: u64 = u64::MAX;

/// The open recordings of one device, shared by every pool on it.
pub(crate) struct Recordings {
    inner: Arc<Inner>,
}

struct Inner {
    /// Distinguishes this set from every other in a thread's cache of open recordings.
    id: u64,
    /// The next ticket to give out (tickets start at 1).
    next_ticket: AtomicU64,
    /// The smallest open ticket, or [`NONE_OPEN`]; written under `open`'s lock.
    min_open: AtomicU64,
    /// Counts the times every recording was closed at once; a thread's cached recording of an
    /// older generation is closed.
    generation: AtomicU64,
    open: Mutex<BTreeSet<u64>>,
}

/// The tickets of the recordings that exposed a block: every one of them lies in
/// `lo..=hi`. Empty (`hi == 0`) for a block never exposed since it was handed out.
#[derive(Debug)]
pub(crate) struct ExposureSpan {
    lo: AtomicU64,
    hi: AtomicU64,
}

/// The tickets open at one moment, sorted: enough to decide for blocks whose spans were set
/// before it, since every recording opened later has a larger ticket than any such span.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpenTickets {
    open: Vec<u64>,
    /// The first ticket not yet handed out at the snapshot.
    next: u64,
}

/// A thread's open recording, cached per recording set.
struct ThreadEntry {
    id: u64,
    ticket: u64,
    generation: u64,
    set: Weak<Inner>,
}

thread_local! {
    static THREAD_RECORDINGS: RefCell<Vec<ThreadEntry>> = const { RefCell::new(Vec::new()) };
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Default for ExposureSpan {
    fn default() -> Self {
        ExposureSpan {
            lo: AtomicU64::new(u64::MAX),
            hi: AtomicU64::new(0),
        }
    }
}

impl ExposureSpan {
    /// Adds the recording `ticket` to the span.
    #[inline]
    pub fn include(&self, ticket: u64) {
        // `hi` first: a reader that sees the new `lo` also sees a `hi` that covers it.
        self.hi.fetch_max(ticket, Ordering::SeqCst);
        self.lo.fetch_min(ticket, Ordering::SeqCst);
    }

    /// Adds every ticket of `other`.
    pub fn merge(&self, other: &ExposureSpan) {
        if let Some((lo, hi)) = other.bounds() {
            self.include(hi);
            self.include(lo);
        }
    }

    /// Forgets every exposure (a block handed out anew).
    #[inline]
    pub fn clear(&mut self) {
        *self.lo.get_mut() = u64::MAX;
        *self.hi.get_mut() = 0;
    }

    /// The span's first and last ticket, if any recording exposed the block.
    #[inline]
    fn bounds(&self) -> Option<(u64, u64)> {
        let hi = self.hi.load(Ordering::SeqCst);
        if hi == 0 {
            return None;
        }
        let lo = self.lo.load(Ordering::SeqCst).min(hi);
        Some((lo, hi))
    }
}

impl OpenTickets {
    /// Whether recording `ticket` may still be open: it was open at the snapshot, or was
    /// handed out after it.
    pub fn may_be_open(&self, ticket: u64) -> bool {
        ticket >= self.next || self.open.binary_search(&ticket).is_ok()
    }

    /// Whether a recording open at the snapshot may name a block with this span.
    pub fn may_name(&self, span: &ExposureSpan) -> bool {
        let Some((lo, hi)) = span.bounds() else {
            return false;
        };
        let first = self.open.partition_point(|&ticket| ticket < lo);
        self.open.get(first).is_some_and(|&ticket| ticket <= hi)
    }
}

impl Recordings {
    /// A set with no recording open.
    pub fn new() -> Recordings {
        Recordings {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                next_ticket: AtomicU64::new(1),
                min_open: AtomicU64::new(NONE_OPEN),
                generation: AtomicU64::new(0),
                open: Mutex::new(BTreeSet::new()),
            }),
        }
    }

    /// The ticket of the calling thread's open recording, opening one if it has none.
    #[inline]
    pub fn thread_ticket(&self) -> u64 {
        let inner = &*self.inner;
        let generation = inner.generation.load(Ordering::Acquire);
        let cached = THREAD_RECORDINGS.with_borrow(|entries| {
            entries
                .iter()
                .find(|entry| entry.id == inner.id && entry.generation == generation)
                .map(|entry| entry.ticket)
        });
        cached.unwrap_or_else(|| self.open_for_thread())
    }

    #[cold]
    fn open_for_thread(&self) -> u64 {
        let inner = &*self.inner;
        let (ticket, generation) = {
            let mut open = inner.lock();
            // Read under the lock: closing everything bumps it under the same lock, so this
            // recording is either closed by that or opened after it.
            let generation = inner.generation.load(Ordering::Acquire);
            let ticket = inner.next_ticket.fetch_add(1, Ordering::SeqCst);
            open.insert(ticket);
            inner.publish_min(&open);
            (ticket, generation)
        };
        THREAD_RECORDINGS.with_borrow_mut(|entries| {
            entries.retain(|entry| entry.id != inner.id && entry.set.strong_count() > 0);
            entries.push(ThreadEntry {
                id: inner.id,
                ticket,
                generation,
                set: Arc::downgrade(&self.inner),
            });
        });
        ticket
    }

    /// Takes the calling thread's open recording away from the thread: its ticket stays
    /// open until [`close`](Self::close), and the thread's next exposure opens a new
    /// recording. `None` if the thread has no open recording.
    pub fn detach_thread(&self) -> Option<u64> {
        let inner = &*self.inner;
        let generation = inner.generation.load(Ordering::Acquire);
        let entry = THREAD_RECORDINGS.with_borrow_mut(|entries| {
            let index = entries.iter().position(|entry| entry.id == inner.id)?;
            Some(entries.swap_remove(index))
        })?;
        (entry.generation == generation).then_some(entry.ticket)
    }

    /// Closes the calling thread's open recording, if it has one.
    pub fn close_thread(&self) {
        if let Some(ticket) = self.detach_thread() {
            self.close(ticket);
        }
    }

    /// Closes the recording `ticket` (nothing if it is closed already).
    pub fn close(&self, ticket: u64) {
        let inner = &*self.inner;
        let mut open = inner.lock();
        if open.remove(&ticket) {
            inner.publish_min(&open);
        }
    }

    /// Closes every open recording, on every thread.
    pub fn close_all(&self) {
        let inner = &*self.inner;
        let mut open = inner.lock();
        open.clear();
        inner.generation.fetch_add(1, Ordering::AcqRel);
        inner.publish_min(&open);
    }

    /// Whether an open recording may name a block with this span. Exact: it looks at the
    /// open set when the fast check cannot decide.
    #[inline(always)]
    pub fn may_name(&self, span: &ExposureSpan) -> bool {
        // The checks that decide for blocks no recording exposed (every free of a replay, or
        // of a workload that never binds) stay inline; the search of the open set does not.
        let Some((lo, hi)) = span.bounds() else {
            return false;
        };
        if self.inner.min_open.load(Ordering::SeqCst) > hi {
            return false;
        }
        self.search_open(lo, hi)
    }

    /// Whether a recording with a ticket in `lo..=hi` is open.
    #[inline(never)]
    fn search_open(&self, lo: u64, hi: u64) -> bool {
        self.inner.lock().range(lo..=hi).next().is_some()
    }

    /// The tickets open now.
    pub fn open_tickets(&self) -> OpenTickets {
        let open = self.inner.lock();
        // Tickets are handed out under this lock, so the two agree.
        OpenTickets {
            open: open.iter().copied().collect(),
            next: self.inner.next_ticket.load(Ordering::SeqCst),
        }
    }

    /// Recordings open now.
    pub fn open_count(&self) -> usize {
        self.inner.lock().len()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, BTreeSet<u64>> {
        // Nothing panics under this lock; recover rather than propagate a foreign poison.
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn publish_min(&self, open: &BTreeSet<u64>) {
        let min = open.first().copied().unwrap_or(NONE_OPEN);
        self.min_open.store(min, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposed(recordings: &Recordings) -> ExposureSpan {
        let span = ExposureSpan::default();
        span.include(recordings.thread_ticket());
        span
    }

    #[test]
    fn a_block_never_exposed_is_free() {
        let recordings = Recordings::new();
        let _open = recordings.thread_ticket();
        assert!(!recordings.may_name(&ExposureSpan::default()));
        assert!(!recordings.open_tickets().may_name(&ExposureSpan::default()));
    }

    #[test]
    fn a_block_is_named_until_its_threads_recording_closes() {
        let recordings = Recordings::new();
        let span = exposed(&recordings);
        assert!(recordings.may_name(&span));
        assert!(recordings.open_tickets().may_name(&span));
        recordings.close_thread();
        assert!(!recordings.may_name(&span));
        assert!(!recordings.open_tickets().may_name(&span));
        // The thread's next exposure opens a new recording with a larger ticket.
        let again = recordings.thread_ticket();
        assert!(again > span.hi.load(Ordering::SeqCst));
        assert!(!recordings.may_name(&span));
    }

    #[test]
    fn another_threads_submission_point_does_not_free_this_threads_blocks() {
        let recordings = Arc::new(Recordings::new());
        let span = exposed(&recordings);
        let other = recordings.clone();
        std::thread::spawn(move || {
            let ticket = other.thread_ticket();
            assert!(ticket > 0);
            other.close_thread();
        })
        .join()
        .expect("thread");
        assert!(recordings.may_name(&span));
        recordings.close_thread();
        assert!(!recordings.may_name(&span));
    }

    #[test]
    fn a_block_exposed_by_two_threads_waits_for_both() {
        let recordings = Arc::new(Recordings::new());
        let span = Arc::new(exposed(&recordings));
        let (to_main, from_worker) = std::sync::mpsc::channel();
        let (to_worker, from_main) = std::sync::mpsc::channel::<()>();
        let worker = {
            let recordings = recordings.clone();
            let span = span.clone();
            std::thread::spawn(move || {
                span.include(recordings.thread_ticket());
                to_main.send(()).expect("main");
                from_main.recv().expect("main");
                recordings.close_thread();
            })
        };
        from_worker.recv().expect("worker");
        recordings.close_thread();
        assert!(recordings.may_name(&span), "the worker's recording is open");
        to_worker.send(()).expect("worker");
        worker.join().expect("worker");
        assert!(!recordings.may_name(&span));
    }

    #[test]
    fn a_detached_recording_stays_open_until_closed() {
        let recordings = Recordings::new();
        let span = exposed(&recordings);
        let ticket = recordings.detach_thread().expect("open");
        // The thread's own submission point no longer covers it.
        recordings.close_thread();
        assert!(recordings.may_name(&span));
        assert_ne!(recordings.thread_ticket(), ticket);
        recordings.close(ticket);
        assert!(!recordings.may_name(&span));
        assert_eq!(recordings.detach_thread().map(|t| t > ticket), Some(true));
    }

    #[test]
    fn closing_all_frees_everything_and_threads_reopen() {
        let recordings = Arc::new(Recordings::new());
        let span = exposed(&recordings);
        let other = recordings.clone();
        let other_span = std::thread::spawn(move || exposed(&other))
            .join()
            .expect("thread");
        recordings.close_all();
        assert!(!recordings.may_name(&span));
        assert!(!recordings.may_name(&other_span));
        assert_eq!(recordings.open_count(), 0);
        let fresh = exposed(&recordings);
        assert!(
            recordings.may_name(&fresh),
            "a new recording after close_all"
        );
        assert_eq!(recordings.open_count(), 1);
    }

    #[test]
    fn a_span_covers_every_ticket_between_its_ends() {
        let recordings = Recordings::new();
        let first = recordings.thread_ticket();
        let second = recordings.detach_thread().expect("open");
        assert_eq!(first, second);
        let third = recordings.thread_ticket();
        let span = ExposureSpan::default();
        span.include(third);
        span.include(first);
        recordings.close(first);
        // `third` is still open.
        assert!(recordings.may_name(&span));
        recordings.close_thread();
        assert!(!recordings.may_name(&span));
        let merged = ExposureSpan::default();
        merged.merge(&span);
        assert_eq!(merged.bounds(), Some((first, third)));
    }

    #[test]
    fn recordings_opened_later_never_name_an_earlier_span() {
        let recordings = Arc::new(Recordings::new());
        let span = exposed(&recordings);
        recordings.close_thread();
        let snapshot_before = recordings.open_tickets();
        let later = recordings.clone();
        std::thread::spawn(move || {
            later.thread_ticket();
        })
        .join()
        .expect("thread");
        assert!(!snapshot_before.may_name(&span));
        assert!(!recordings.may_name(&span));
        assert!(!recordings.open_tickets().may_name(&span));
    }
}
