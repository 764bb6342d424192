//! A reserve of device memory allocated ahead of demand, on a thread of its own, so that a
//! map that needs a new chunk normally takes a ready one instead of waiting for
//! `vkAllocateMemory` on the caller's thread.
//!
//! The owner ([`Chunks`](super::chunks::Chunks)) orders chunks; the thread allocates them one
//! at a time, in order; the owner takes ready ones, waits for the one in flight where they
//! fall short, and drops orders the thread has not started (allocating what is missing
//! itself costs no more than waiting for the thread to start them). `vkAllocateMemory` and `vkFreeMemory` need no external synchronization on the
//! device, so the thread calls them while the owner binds. The thread holds the device's
//! handle ([`SparseDevice`], shared) for its whole life, and is stopped and joined by
//! [`shutdown`](Reserve::shutdown) (also on drop), which frees every chunk it still holds.
//!
//! Guarantees:
//! - every byte ordered counts in [`held`](Reserve::held) from the order until it is taken,
//!   freed, dropped or its allocation fails, so the owner can keep it within its limit;
//! - a failed background allocation (out of memory or any other result) stops the reserve:
//!   no order is accepted until [`release`](Reserve::release) re-arms it. The failure is
//!   never reported to a caller; the caller's own allocation then takes the usual path;
//! - no chunk outlives the reserve: [`shutdown`](Reserve::shutdown) joins the thread and
//!   frees what it allocated and nobody took.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ash::vk;

use super::device::SparseDevice;

/// A chunk the reserve allocated: bound nowhere, owned by whoever takes it.
pub(crate) struct ReadyChunk {
    pub memory: vk::DeviceMemory,
    pub bytes: u64,
}

/// What the reserve's thread did, for the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ReserveWork {
    /// `vkAllocateMemory` calls on the thread that succeeded.
    pub allocations: u64,
    /// Calls on the thread that failed.
    pub failures: u64,
    /// Time in those calls, failed ones included.
    pub time: Duration,
}

/// What the owner and the thread share, under one lock.
#[derive(Default)]
struct State {
    /// Sizes ordered and not started, oldest first.
    orders: VecDeque<u64>,
    /// The size being allocated now.
    in_flight: Option<u64>,
    /// Chunks allocated and not taken, oldest first.
    ready: VecDeque<ReadyChunk>,
    /// Bytes queued, in flight or ready.
    held: u64,
    /// A background allocation failed: no more orders until re-armed.
    failed: bool,
    /// The thread is to end.
    stop: bool,
    work: ReserveWork,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled on every change of `state`, both ways.
    changed: Condvar,
}

/// The reserve of one pool's chunks: its thread, started at the first order, and the
/// owner's count of what it holds.
pub(crate) struct Reserve {
    shared: Arc<Shared>,
    thread: Option<(JoinHandle<()>, SparseDevice)>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared
        .state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Reserve {
    /// An empty reserve with no thread.
    pub fn new() -> Reserve {
        Reserve {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
            thread: None,
        }
    }

    /// Bytes held: ordered, being allocated, or ready.
    pub fn held(&self) -> u64 {
        lock(&self.shared).held
    }

    /// What the thread did so far.
    pub fn work(&self) -> ReserveWork {
        lock(&self.shared).work
    }

    /// Orders a chunk of `bytes`, starting the thread on `sparse` at the first order.
    /// Returns `false`, ordering nothing, when the reserve is stopped by a failure or the
    /// thread could not be started.
    pub fn order(&mut self, sparse: &SparseDevice, bytes: u64) -> bool {
        if self.thread.is_none() && !self.start(sparse) {
            return false;
        }
        let mut state = lock(&self.shared);
        if state.failed || state.stop {
            return false;
        }
        state.orders.push_back(bytes);
        state.held += bytes;
        drop(state);
        self.shared.changed.notify_all();
        true
    }

    /// Takes ready chunks until they cover `bytes`; where they fall short and a chunk is
    /// being allocated, waits for it (it is further along than an allocation the caller
    /// would start now). Orders not started are dropped. Returns the chunks, which may cover
    /// less than `bytes` (the caller allocates the rest), and the time waited.
    pub fn take(&mut self, bytes: u64) -> (Vec<ReadyChunk>, Duration) {
        let start = Instant::now();
        let mut waited = false;
        let mut taken = Vec::new();
        let mut covered = 0u64;
        let mut state = lock(&self.shared);
        drop_orders(&mut state);
        loop {
            while covered < bytes {
                let Some(chunk) = state.ready.pop_front() else {
                    break;
                };
                covered += chunk.bytes;
                taken.push(chunk);
            }
            if covered >= bytes || state.in_flight.is_none() {
                break;
            }
            waited = true;
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        state.held -= covered;
        drop(state);
        let time = if waited {
            start.elapsed()
        } else {
            Duration::ZERO
        };
        (taken, time)
    }

    /// Blocks until every order has been allocated or has failed: for tests and
    /// measurements.
    pub fn settle(&self) {
        let mut state = lock(&self.shared);
        while state.in_flight.is_some() || !state.orders.is_empty() {
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Drops orders not started, waits for an allocation in flight, and frees every ready
    /// chunk; re-arms the reserve after a failure. Returns the bytes freed, the `vkFreeMemory`
    /// calls and the time they took together with the wait.
    pub fn release(&mut self, sparse: &SparseDevice) -> (u64, u64, Duration) {
        let start = Instant::now();
        let mut state = lock(&self.shared);
        drop_orders(&mut state);
        while state.in_flight.is_some() {
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        let ready: Vec<ReadyChunk> = state.ready.drain(..).collect();
        state.failed = false;
        let (mut bytes, mut frees) = (0, 0);
        for chunk in ready {
            // SAFETY: a ready chunk was never bound, so no range or GPU work uses it.
            unsafe { sparse.free_chunk(chunk.memory) };
            state.held -= chunk.bytes;
            bytes += chunk.bytes;
            frees += 1;
        }
        drop(state);
        let time = if frees > 0 || bytes > 0 {
            start.elapsed()
        } else {
            Duration::ZERO
        };
        (bytes, frees, time)
    }

    /// Stops and joins the thread, then frees every chunk it allocated that was not taken.
    /// Idempotent; the reserve accepts no order after it.
    pub fn shutdown(&mut self) {
        let Some((thread, sparse)) = self.thread.take() else {
            return;
        };
        lock(&self.shared).stop = true;
        self.shared.changed.notify_all();
        // The thread cannot panic (it only allocates and counts); a panic would have left
        // its chunk in `ready` or lost, which the loop below still frees.
        let _ = thread.join();
        let mut state = lock(&self.shared);
        for chunk in state.ready.drain(..) {
            // SAFETY: a ready chunk was never bound, and the thread that made it has ended.
            unsafe { sparse.free_chunk(chunk.memory) };
        }
        state.orders.clear();
        state.held = 0;
    }

    fn start(&mut self, sparse: &SparseDevice) -> bool {
        let shared = self.shared.clone();
        let device = sparse.clone();
        let spawned = std::thread::Builder::new()
            .name("wgpool-reserve".into())
            .spawn(move || allocate_orders(&shared, &device));
        match spawned {
            Ok(thread) => {
                self.thread = Some((thread, sparse.clone()));
                true
            }
            Err(_) => {
                lock(&self.shared).failed = true;
                false
            }
        }
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The thread: allocates the orders one at a time until told to stop.
fn allocate_orders(shared: &Shared, sparse: &SparseDevice) {
    let mut state = lock(shared);
    loop {
        if state.stop {
            return;
        }
        let Some(bytes) = state.orders.pop_front() else {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            continue;
        };
        state.in_flight = Some(bytes);
        drop(state);
        let start = Instant::now();
        let result = sparse.allocate_chunk(bytes);
        let elapsed = start.elapsed();
        state = lock(shared);
        state.in_flight = None;
        state.work.time += elapsed;
        match result {
            Ok(memory) => {
                state.work.allocations += 1;
                state.ready.push_back(ReadyChunk { memory, bytes });
            }
            Err(_) => {
                state.work.failures += 1;
                state.failed = true;
                state.held -= bytes;
                drop_orders(&mut state);
            }
        }
        shared.changed.notify_all();
    }
}

/// Drops the orders not started.
fn drop_orders(state: &mut State) {
    let dropped: Vec<u64> = state.orders.drain(..).collect();
    state.held -= dropped.iter().sum::<u64>();
}
