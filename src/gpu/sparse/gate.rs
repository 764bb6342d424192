//! One lock per Vulkan queue that both wgpu and the pool use.
//!
//! A `VkQueue` is externally synchronized: `vkQueueSubmit` from wgpu and `vkQueueBindSparse`
//! from the pool must never run at the same time on it. wgpu serializes its own submissions
//! with a lock inside wgpu-core that nothing outside can take, and `Queue::as_hal` takes no
//! lock at all. So on a device whose only queue is shared (lavapipe has one queue), the
//! device is opened with a function table in which the queue entry points of wgpu's
//! `ash::Device` go through a [`QueueGate`]: the same mutex the pool's binder holds while it
//! calls `vkQueueBindSparse`. Every submission wgpu makes, from any application thread, then
//! excludes binding and vice versa.
//!
//! Every wgpu submission on a device that maps pages also submits the binds pools queued on
//! the device first (the `batch` module), so that work waiting for a queued map's bind never
//! waits for a bind not submitted yet. For that, wgpu's queue goes through a gate on every
//! such device; where binds have a queue of their own, the two queues have a gate each.
//!
//! Covered entry points: `vkQueueSubmit`, `vkQueueSubmit2`, `vkQueueWaitIdle` and
//! `vkDeviceWaitIdle` (which needs every queue of the device). Not covered:
//! `vkQueuePresentKHR`, which wgpu-hal loads through its own swapchain table. A headless
//! compute device never presents; an application that presents from a device opened by
//! [`request_device`](super::request_device) on a single-queue adapter must not allocate
//! from a pool in pages mode while it presents on another thread.

use std::ffi::{CStr, c_void};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, Weak};

use ash::vk;

use super::device::{SparseDevice, SparseDeviceInner};

/// The real entry points behind a gated queue.
#[derive(Clone, Copy)]
pub(crate) struct RealQueueFns {
    pub queue_submit: vk::PFN_vkQueueSubmit,
    pub queue_submit2: vk::PFN_vkQueueSubmit2,
    pub queue_wait_idle: vk::PFN_vkQueueWaitIdle,
    pub device_wait_idle: vk::PFN_vkDeviceWaitIdle,
}

/// The lock of one queue, and the driver's functions to call while holding it.
pub(crate) struct QueueGate {
    device: vk::Device,
    queue: vk::Queue,
    lock: Mutex<()>,
    real: RealQueueFns,
    /// The device whose queued binds a submission on this queue submits first (set once the
    /// device is open; weak, as the device holds its gates).
    sparse: OnceLock<Weak<SparseDeviceInner>>,
}

impl QueueGate {
    /// Holds the queue: no gated call runs on it until the guard drops.
    pub fn hold(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data: a panic while it was held leaves nothing inconsistent.
        self.lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Names the device whose queued binds submissions on this queue submit first.
    pub fn attach(&self, sparse: &SparseDevice) {
        let _ = self.sparse.set(Arc::downgrade(&sparse.inner));
    }

    /// Submits the queued binds of the attached device before a submission on this queue;
    /// the caller holds this gate. The driver's error when that failed.
    fn submit_queued_first(self: &Arc<Self>) -> Result<(), vk::Result> {
        let Some(inner) = self.sparse.get().and_then(Weak::upgrade) else {
            return Ok(());
        };
        SparseDevice { inner }
            .submit_queued_for(self)
            .map(drop)
            .map_err(|error| error.vulkan_result())
    }
}

impl QueueGate {
    /// A gate that no wgpu entry point goes through: the lock of a queue only the pool uses,
    /// shared by every pool on the device.
    pub fn own_queue(device: vk::Device, queue: vk::Queue, real: RealQueueFns) -> Arc<QueueGate> {
        Arc::new(QueueGate {
            device,
            queue,
            lock: Mutex::new(()),
            real,
            sparse: OnceLock::new(),
        })
    }
}

/// Every live gate. Looked up on each gated call: a handful of entries at most.
static GATES: RwLock<Vec<Arc<QueueGate>>> = RwLock::new(Vec::new());

fn gates() -> std::sync::RwLockReadGuard<'static, Vec<Arc<QueueGate>>> {
    GATES
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn gate_of_queue(queue: vk::Queue) -> Option<Arc<QueueGate>> {
    gates().iter().find(|g| g.queue == queue).cloned()
}

/// Registers a gate for `queue` of `device`, whose real functions are `real`.
pub(crate) fn register(device: vk::Device, queue: vk::Queue, real: RealQueueFns) -> Arc<QueueGate> {
    let gate = Arc::new(QueueGate {
        device,
        queue,
        lock: Mutex::new(()),
        real,
        sparse: OnceLock::new(),
    });
    GATES
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(gate.clone());
    gate
}

/// Forgets the gates of `device` (called as the device is destroyed: its handles may be
/// reused by a later device).
pub(crate) fn unregister(device: vk::Device) {
    GATES
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .retain(|g| g.device != device);
}

/// The entry point to hand wgpu in place of `name`, or `None` to hand it the driver's own.
pub(crate) fn gated_entry_point(name: &CStr) -> Option<*const c_void> {
    let entry: *const c_void = match name.to_bytes() {
        b"vkQueueSubmit" => gated_queue_submit as *const c_void,
        b"vkQueueSubmit2" | b"vkQueueSubmit2KHR" => gated_queue_submit2 as *const c_void,
        b"vkQueueWaitIdle" => gated_queue_wait_idle as *const c_void,
        b"vkDeviceWaitIdle" => gated_device_wait_idle as *const c_void,
        _ => return None,
    };
    Some(entry)
}

unsafe extern "system" fn gated_queue_submit(
    queue: vk::Queue,
    submit_count: u32,
    submits: *const vk::SubmitInfo<'_>,
    fence: vk::Fence,
) -> vk::Result {
    let Some(gate) = gate_of_queue(queue) else {
        // Only queues of gated devices reach here, and their gates live as long as the device.
        return vk::Result::ERROR_DEVICE_LOST;
    };
    let _held = gate.hold();
    if let Err(result) = gate.submit_queued_first() {
        // The work may wait for the maps that could not be bound: it is not submitted.
        return result;
    }
    // SAFETY: the caller's arguments are passed on unchanged to the driver's own function,
    // with the queue now externally synchronized against the pool's binds.
    unsafe { (gate.real.queue_submit)(queue, submit_count, submits, fence) }
}

unsafe extern "system" fn gated_queue_submit2(
    queue: vk::Queue,
    submit_count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
) -> vk::Result {
    let Some(gate) = gate_of_queue(queue) else {
        return vk::Result::ERROR_DEVICE_LOST;
    };
    let _held = gate.hold();
    if let Err(result) = gate.submit_queued_first() {
        return result;
    }
    // SAFETY: as in `gated_queue_submit`.
    unsafe { (gate.real.queue_submit2)(queue, submit_count, submits, fence) }
}

unsafe extern "system" fn gated_queue_wait_idle(queue: vk::Queue) -> vk::Result {
    let Some(gate) = gate_of_queue(queue) else {
        return vk::Result::ERROR_DEVICE_LOST;
    };
    let _held = gate.hold();
    // SAFETY: as in `gated_queue_submit`.
    unsafe { (gate.real.queue_wait_idle)(queue) }
}

unsafe extern "system" fn gated_device_wait_idle(device: vk::Device) -> vk::Result {
    let of_device: Vec<Arc<QueueGate>> = gates()
        .iter()
        .filter(|g| g.device == device)
        .cloned()
        .collect();
    let Some(first) = of_device.first() else {
        return vk::Result::ERROR_DEVICE_LOST;
    };
    let _held: Vec<MutexGuard<'_, ()>> = of_device.iter().map(|g| g.hold()).collect();
    // SAFETY: every gated queue of the device is held, as vkDeviceWaitIdle requires.
    unsafe { (first.real.device_wait_idle)(device) }
}
