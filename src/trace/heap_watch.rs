//! The device heap's usage during a GPU replay, read on a thread of its own.
//!
//! Reading the heap's usage (`VK_EXT_memory_budget`) is a driver call, and on NVIDIA it can
//! wait for sparse binds in flight: 0.1 to 0.5 ms a read in pages mode on an H100, where a
//! pool in segments mode sees 10 to 15 us. Read on the replaying thread, those waits were
//! the harness's time inside the timed loop (4 ms on a KV-cache decode, 30 ms on ResNet
//! training). The replaying thread now only tells the watcher that the pool's device memory
//! changed; the watcher reads the heap and keeps the peak.
//!
//! Guarantee: the heap is read after every change the replaying thread reported, and once
//! more when the watch finishes, so the peak covers every state the memory stayed in until
//! a read; a rise and fall shorter than one read (a segment created and destroyed within
//! it) can be missed. The pool's own count of its device memory
//! (`device_memory_peak_bytes`) is exact; this one checks it from outside.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

/// What the watcher read over its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct HeapReading {
    /// The peak of the heap's usage less its usage before the pool existed.
    pub peak: u64,
    /// Time the watcher spent in reads (on its own thread).
    pub query_time: Duration,
    /// Reads made.
    pub queries: u64,
}

/// The flags the replaying thread sets and the watcher clears.
#[derive(Debug, Default)]
pub(super) struct WatchSignal {
    /// The pool's device memory changed since the watcher last looked.
    changed: AtomicBool,
    /// The run is over: read once more and stop.
    done: AtomicBool,
}

/// A running watcher thread, scoped to one run.
pub(super) struct HeapWatch<'scope> {
    signal: &'scope WatchSignal,
    thread: ScopedJoinHandle<'scope, HeapReading>,
}

impl<'scope> HeapWatch<'scope> {
    /// Starts a watcher in `scope` that reads the heap with `read` (its usage now, or
    /// `None` where the driver stopped answering) after each [`changed`](Self::changed),
    /// and reports the peak rise over `before`.
    pub(super) fn start<'env, R>(
        scope: &'scope Scope<'scope, 'env>,
        signal: &'scope WatchSignal,
        before: u64,
        read: R,
    ) -> HeapWatch<'scope>
    where
        R: Fn() -> Option<u64> + Send + 'scope,
    {
        let thread = scope.spawn(move || {
            let mut reading = HeapReading::default();
            let mut look = || {
                let started = Instant::now();
                let usage = read();
                reading.query_time += started.elapsed();
                reading.queries += 1;
                if let Some(usage) = usage {
                    reading.peak = reading.peak.max(usage.saturating_sub(before));
                }
            };
            loop {
                if signal.changed.swap(false, Ordering::AcqRel) {
                    look();
                } else if signal.done.load(Ordering::Acquire) {
                    break;
                } else {
                    // Woken by `changed` or `finish`; a spurious wake-up only loops again.
                    thread::park();
                }
            }
            look();
            reading
        });
        HeapWatch { signal, thread }
    }

    /// Tells the watcher the pool's device memory changed: a store, and a wake-up where the
    /// watcher sleeps.
    pub(super) fn changed(&self) {
        self.signal.changed.store(true, Ordering::Release);
        self.thread.thread().unpark();
    }

    /// Reads the heap a last time, stops the watcher and returns what it read.
    pub(super) fn finish(self) -> HeapReading {
        self.signal.done.store(true, Ordering::Release);
        self.thread.thread().unpark();
        match self.thread.join() {
            Ok(reading) => reading,
            // The reads do not panic; if one did, the panic belongs to the caller.
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn the_watcher_reads_after_each_change_and_keeps_the_peak_rise() {
        let usage = AtomicU64::new(100);
        let seen = AtomicU64::new(0);
        let signal = WatchSignal::default();
        let reading = thread::scope(|scope| {
            let watch = HeapWatch::start(scope, &signal, 100, || {
                let level = usage.load(Ordering::Acquire);
                seen.store(level, Ordering::Release);
                Some(level)
            });
            for level in [150, 400, 120] {
                usage.store(level, Ordering::Release);
                watch.changed();
                // The next level replaces this one only once the watcher has read it.
                while seen.load(Ordering::Acquire) != level {
                    thread::yield_now();
                }
            }
            watch.finish()
        });
        assert_eq!(reading.peak, 300);
        // Three changes and the last read; a read may repeat where a wake-up came late.
        assert!(reading.queries >= 4, "{reading:?}");
    }

    #[test]
    fn a_watch_finished_at_once_reads_the_heap_once() {
        let signal = WatchSignal::default();
        let reading =
            thread::scope(|scope| HeapWatch::start(scope, &signal, 10, || Some(25)).finish());
        assert_eq!((reading.peak, reading.queries), (15, 1), "{reading:?}");
    }

    #[test]
    fn a_driver_that_stops_answering_leaves_the_peak_where_it_was() {
        let signal = WatchSignal::default();
        let answers = AtomicU64::new(0);
        let reading = thread::scope(|scope| {
            let watch = HeapWatch::start(scope, &signal, 0, || {
                (answers.fetch_add(1, Ordering::AcqRel) == 0).then_some(64)
            });
            watch.changed();
            watch.finish()
        });
        assert_eq!(reading.peak, 64, "{reading:?}");
    }
}
