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

/// Where the reserve's chunks come from: the device ([`SparseDevice`]), or in unit tests a
/// stand-in that can fail on demand.
pub(crate) trait ChunkSource: Send + Sync + 'static {
    /// `vkAllocateMemory` of `bytes` of the chunk memory type. Called from the reserve's
    /// thread: it must need no external synchronization.
    fn allocate(&self, bytes: u64) -> Result<vk::DeviceMemory, vk::Result>;

    /// `vkFreeMemory`.
    ///
    /// # Safety
    ///
    /// `memory` came from [`allocate`](Self::allocate) on this source, is freed once, and
    /// nothing uses it.
    unsafe fn free(&self, memory: vk::DeviceMemory);
}

impl ChunkSource for SparseDevice {
    fn allocate(&self, bytes: u64) -> Result<vk::DeviceMemory, vk::Result> {
        self.allocate_chunk(bytes)
    }

    unsafe fn free(&self, memory: vk::DeviceMemory) {
        // SAFETY: as the caller promised.
        unsafe { self.free_chunk(memory) }
    }
}

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
    thread: Option<(JoinHandle<()>, Arc<dyn ChunkSource>)>,
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

    /// Orders a chunk of `bytes`, starting the thread on `source` at the first order (later
    /// orders use that source).
    /// Returns `false`, ordering nothing, when the reserve is stopped by a failure or the
    /// thread could not be started.
    pub fn order<S: ChunkSource + Clone>(&mut self, source: &S, bytes: u64) -> bool {
        if self.thread.is_none() && !self.start(Arc::new(source.clone())) {
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
    pub fn release(&mut self) -> (u64, u64, Duration) {
        let Some((_, source)) = &self.thread else {
            return (0, 0, Duration::ZERO);
        };
        let source = source.clone();
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
            unsafe { source.free(chunk.memory) };
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
        let Some((thread, source)) = self.thread.take() else {
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
            unsafe { source.free(chunk.memory) };
        }
        state.orders.clear();
        state.held = 0;
    }

    fn start(&mut self, source: Arc<dyn ChunkSource>) -> bool {
        let shared = self.shared.clone();
        let on_thread = source.clone();
        let spawned = std::thread::Builder::new()
            .name("wgpool-reserve".into())
            .spawn(move || allocate_orders(&shared, &*on_thread));
        match spawned {
            Ok(thread) => {
                self.thread = Some((thread, source));
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
fn allocate_orders(shared: &Shared, source: &dyn ChunkSource) {
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
        let result = source.allocate(bytes);
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use super::*;

    /// Hands out made-up handles, counts the live ones, and fails while told to.
    #[derive(Clone, Default)]
    struct Fake(Arc<FakeState>);

    #[derive(Default)]
    struct FakeState {
        next: AtomicU64,
        live: AtomicU64,
        fail: AtomicBool,
    }

    impl ChunkSource for Fake {
        fn allocate(&self, _bytes: u64) -> Result<vk::DeviceMemory, vk::Result> {
            if self.0.fail.load(Ordering::SeqCst) {
                return Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
            }
            self.0.live.fetch_add(1, Ordering::SeqCst);
            let handle = self.0.next.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(vk::Handle::from_raw(handle))
        }

        unsafe fn free(&self, _memory: vk::DeviceMemory) {
            self.0.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Orders are held from the order on, taken whole, and what is not taken is freed at
    /// shutdown.
    #[test]
    fn orders_are_counted_taken_and_freed_at_shutdown() {
        let fake = Fake::default();
        let mut reserve = Reserve::new();
        assert!(reserve.order(&fake, 4 << 20));
        assert!(reserve.order(&fake, 2 << 20));
        assert_eq!(reserve.held(), 6 << 20, "counted from the order on");
        reserve.settle();
        let (taken, _) = reserve.take(1 << 20);
        assert_eq!(taken.len(), 1, "the first ready chunk covers it");
        assert_eq!(taken[0].bytes, 4 << 20);
        assert_eq!(reserve.held(), 2 << 20);
        assert_eq!(reserve.work().allocations, 2);
        reserve.shutdown();
        assert_eq!(reserve.held(), 0);
        // The taken chunk is the caller's; the other was freed.
        assert_eq!(fake.0.live.load(Ordering::SeqCst), 1);
        assert!(!reserve.order(&fake, 1 << 20), "no order after shutdown");
    }

    /// A failed allocation uncounts its order, stops the reserve (orders are refused) until
    /// it is released, and is never handed to a caller.
    #[test]
    fn a_failure_stops_the_reserve_until_it_is_released() {
        let fake = Fake::default();
        let mut reserve = Reserve::new();
        fake.0.fail.store(true, Ordering::SeqCst);
        assert!(reserve.order(&fake, 2 << 20));
        reserve.settle();
        assert_eq!(reserve.held(), 0);
        assert_eq!(reserve.work().failures, 1);
        assert!(!reserve.order(&fake, 2 << 20), "stopped");
        let (taken, waited) = reserve.take(2 << 20);
        assert!(taken.is_empty());
        assert_eq!(waited, Duration::ZERO);
        fake.0.fail.store(false, Ordering::SeqCst);
        assert_eq!(reserve.release().0, 0);
        assert!(reserve.order(&fake, 2 << 20), "re-armed");
        reserve.settle();
        assert_eq!(reserve.held(), 2 << 20);
        let (bytes, frees, _) = reserve.release();
        assert_eq!((bytes, frees), (2 << 20, 1));
        assert_eq!(reserve.held(), 0);
        drop(reserve);
        assert_eq!(fake.0.live.load(Ordering::SeqCst), 0);
    }
}
