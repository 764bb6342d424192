//! Submission points of a device: when dropped blocks that recorded commands may name are
//! freed, for every pool on the device and every thread.
//!
//! wgpu runs work in submission order. A block whose binding was recorded into an encoder
//! that is not submitted yet must not be handed out again: work for the new owner (a
//! [`Pool::write`](super::Pool::write), another encoder) could be submitted first and change
//! the bytes the recorded commands read. Under [`FreeTiming::AfterSubmit`](super::FreeTiming)
//! (the default) such a block is held back when dropped, and freed once every recording that
//! exposed it has been submitted (see the `recordings` module for the rule).
//!
//! Every pool on one device shares one [`DeviceSubmissions`]: a submission point reached
//! through any of them, or through [`mark_submitted`], covers the blocks of all of them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::pool_shared::PoolShared;
use super::recordings::Recordings;
use crate::gpu::DeviceKey;

/// The recordings and pools of one device.
pub(crate) struct DeviceSubmissions {
    /// The device: the key under which pools find this set.
    pub key: DeviceKey,
    pub recordings: Recordings,
    /// The pools on the device, for releasing their held blocks.
    pools: Mutex<Vec<Weak<PoolShared>>>,
    /// Blocks held back in all pools of the device; submission points skip the pools when
    /// there are none.
    held_blocks: AtomicUsize,
    /// Counts the submission points reached on the device, in any way: the work clock that
    /// tells a pool in pages mode whether the work of freed bytes may have been submitted
    /// after its last ordering (see the memory layer's `wrappers` module).
    pub points: Arc<AtomicU64>,
}

/// Every device's set, weakly: a set lives while a pool on its device does.
static DEVICES: Mutex<Vec<Weak<DeviceSubmissions>>> = Mutex::new(Vec::new());

impl DeviceSubmissions {
    /// The set of `device`, made if no pool on the device has one.
    pub fn for_device(device: &wgpu::Device) -> Arc<DeviceSubmissions> {
        let mut devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        devices.retain(|set| set.strong_count() > 0);
        if let Some(set) = devices
            .iter()
            .filter_map(Weak::upgrade)
            .find(|set| set.key.matches(device))
        {
            return set;
        }
        let set = Arc::new(DeviceSubmissions {
            key: DeviceKey::of(device),
            recordings: Recordings::new(),
            pools: Mutex::new(Vec::new()),
            held_blocks: AtomicUsize::new(0),
            points: Arc::new(AtomicU64::new(0)),
        });
        devices.push(Arc::downgrade(&set));
        set
    }

    /// The set of `device` if a pool on it exists.
    fn find(device: &wgpu::Device) -> Option<Arc<DeviceSubmissions>> {
        let devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        devices
            .iter()
            .filter_map(Weak::upgrade)
            .find(|set| set.key.matches(device))
    }

    /// Adds a pool whose held blocks submission points release.
    pub fn register(&self, pool: &Arc<PoolShared>) {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|pool| pool.strong_count() > 0);
        pools.push(Arc::downgrade(pool));
    }

    /// Counts blocks held back (positive) or released (negative).
    pub fn count_held(&self, added: usize, released: usize) {
        if added > 0 {
            self.held_blocks.fetch_add(added, Ordering::SeqCst);
        }
        if released > 0 {
            self.held_blocks.fetch_sub(released, Ordering::SeqCst);
        }
    }

    /// The calling thread's commands recorded so far are submitted.
    pub fn thread_submitted(&self) {
        self.tick();
        self.recordings.close_thread();
        self.release_held();
    }

    /// Every command recorded so far, on any thread, is submitted.
    pub fn all_submitted(&self) {
        self.tick();
        self.recordings.close_all();
        self.release_held();
    }

    /// Counts a submission point, before the recordings it closes free anything: a block
    /// freed after it carries a clock value past it.
    fn tick(&self) {
        self.points.fetch_add(1, Ordering::SeqCst);
    }

    /// Frees, in every pool of the device, the held blocks that no open recording may name.
    pub fn release_held(&self) {
        // Sequentially consistent, after the recordings were closed: see `PoolShared::release`.
        if self.held_blocks.load(Ordering::SeqCst) == 0 {
            return;
        }
        let pools: Vec<Arc<PoolShared>> = {
            let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
            pools.iter().filter_map(Weak::upgrade).collect()
        };
        for pool in pools {
            pool.release_held();
        }
    }
}

/// A thread's recording, handed over to whoever submits its commands
/// ([`Pool::take_recording`](super::Pool::take_recording)).
///
/// Blocks the recording exposed stay held back while the token lives. Drop it once the
/// command buffers recorded on that thread are submitted, on any thread:
///
/// ```no_run
/// # fn demo(pool: wgpool::pool::Pool, block: wgpool::pool::Block) -> Result<(), Box<dyn std::error::Error>> {
/// let device = pool.device().clone();
/// let worker_pool = pool.clone();
/// let (commands, recording) = std::thread::spawn(move || {
///     let mut encoder = device.create_command_encoder(&Default::default());
///     let _ = block.binding(); // ... and record passes that bind it into `encoder`
///     drop(block); // held back: the recording is not submitted yet
///     (encoder.finish(), worker_pool.take_recording())
/// })
/// .join()
/// .expect("worker");
/// pool.queue().submit([commands]);
/// drop(recording); // now the block's memory may serve other requests
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the recording declares its commands submitted"]
pub struct Recording {
    submissions: Arc<DeviceSubmissions>,
    ticket: Option<u64>,
}

impl Recording {
    pub(crate) fn detach(submissions: &Arc<DeviceSubmissions>) -> Recording {
        Recording {
            submissions: submissions.clone(),
            ticket: submissions.recordings.detach_thread(),
        }
    }

    /// Whether the thread had exposed any block when the recording was taken (an empty
    /// recording holds nothing back).
    pub fn is_empty(&self) -> bool {
        self.ticket.is_none()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.submissions.tick();
            self.submissions.recordings.close(ticket);
            self.submissions.release_held();
        }
    }
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("open", &self.ticket.is_some())
            .finish()
    }
}

/// Blocks held back for unsubmitted recordings in all pools on `device` (0 when no pool
/// exists on it): for tests of the count that lets submission points skip the pools.
#[doc(hidden)]
pub fn held_blocks_on(device: &wgpu::Device) -> usize {
    DeviceSubmissions::find(device).map_or(0, |set| set.held_blocks.load(Ordering::SeqCst))
}

/// A submission point for every pool on `device`, for the calling thread: the commands it
/// recorded so far are submitted (call it after your own `queue.submit`). Blocks of any pool
/// on the device that were held back only for those commands are freed. Does nothing when no
/// pool exists on `device`.
///
/// [`Pool::submit`](super::Pool::submit) and [`Pool::mark_submitted`](super::Pool::mark_submitted)
/// do the same through a pool handle.
pub fn mark_submitted(device: &wgpu::Device) {
    if let Some(set) = DeviceSubmissions::find(device) {
        set.thread_submitted();
    }
}
