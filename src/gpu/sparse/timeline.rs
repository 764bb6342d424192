//! Ordering binds with the GPU through timeline semaphores, so that neither a map nor an
//! unmap makes the CPU wait.
//!
//! - Every bind signals the *bind timeline* with the next value and waits for the value
//!   before it: binds apply in the order they were submitted, whichever queue they use.
//! - After a map, wgpu's next submission waits (on the GPU) for the map's value: work that
//!   uses the new pages runs after they are bound.
//! - Before an unmap, an empty wgpu submission signals the *GPU timeline*: the signal's
//!   first synchronization scope is every command submitted to wgpu's queue before it, so
//!   the unbind, which waits for that value, runs only after the work that may still use the
//!   pages has finished.
//! - The CPU waits only before `vkFreeMemory`, for the binds that used the memory. A
//!   released range's buffer is destroyed once the binds into it have been applied, which
//!   the pool checks without waiting.

use std::sync::{Mutex, MutexGuard};

use ash::vk;
use wgpu::hal::api::Vulkan;

use super::batch::QueuedBinds;
use super::error::SparseError;

/// The bind timeline's state: what was submitted, and the binds queued for the next call.
#[derive(Debug, Default)]
pub(crate) struct BindLine {
    /// The last value a bind was submitted to signal.
    pub last: u64,
    /// Binds queued for the next call, whose batches signal `last + 1` on.
    pub queued: QueuedBinds,
}

/// The two timeline semaphores of a device and their counters.
pub(crate) struct Timelines {
    /// Signaled by binds, value `n` by the `n`-th.
    pub binds: vk::Semaphore,
    /// The last value a bind was submitted to signal, and the binds queued. Its value changes
    /// only while the bind queue is held through its gate; the lock is taken after the gate.
    line: Mutex<BindLine>,
    /// Signaled by empty wgpu submissions, value `n` once all GPU work before the `n`-th
    /// had finished.
    gpu: vk::Semaphore,
    /// The last GPU timeline value asked for; the lock also keeps one signal at a time
    /// pending in wgpu's queue.
    last_gpu: Mutex<u64>,
}

impl Timelines {
    /// Both semaphores, on a device with timeline semaphores enabled.
    pub fn new(raw: &ash::Device) -> Result<Timelines, SparseError> {
        let create = || {
            let mut kind = vk::SemaphoreTypeCreateInfo::default()
                .semaphore_type(vk::SemaphoreType::TIMELINE)
                .initial_value(0);
            let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
            // SAFETY: a timeline semaphore on a device with the feature enabled.
            unsafe { raw.create_semaphore(&info, None) }
                .map_err(SparseError::vulkan("vkCreateSemaphore (timeline)"))
        };
        let binds = create()?;
        let gpu = match create() {
            Ok(gpu) => gpu,
            Err(error) => {
                // SAFETY: nothing used it yet.
                unsafe { raw.destroy_semaphore(binds, None) };
                return Err(error);
            }
        };
        Ok(Timelines {
            binds,
            line: Mutex::new(BindLine::default()),
            gpu,
            last_gpu: Mutex::new(0),
        })
    }

    /// Makes wgpu's next submission wait, on the GPU, until the bind that signals `value`
    /// has been applied.
    pub fn gpu_waits_for_bind(&self, queue: &wgpu::Queue, value: u64) {
        // SAFETY: the hal queue is used only to add a wait to its next submission; the
        // semaphore belongs to the queue's device and lives as long as the device.
        if let Some(hal) = unsafe { queue.as_hal::<Vulkan>() } {
            hal.add_wait_semaphore(
                self.binds,
                Some(value),
                vk::PipelineStageFlags::ALL_COMMANDS,
            );
        }
    }

    /// Submits an empty batch to wgpu's queue that signals the GPU timeline once everything
    /// submitted before it has finished, and returns the value to wait for.
    pub fn gpu_done(&self, queue: &wgpu::Queue) -> u64 {
        let mut last = self.last_gpu.lock().unwrap_or_else(|p| p.into_inner());
        *last += 1;
        // SAFETY: as in `gpu_waits_for_bind`; one signal of ours is pending at a time (the
        // lock is held until the submission below has taken it), so values rise.
        if let Some(hal) = unsafe { queue.as_hal::<Vulkan>() } {
            hal.add_signal_semaphore(self.gpu, Some(*last));
        }
        queue.submit(std::iter::empty());
        *last
    }

    /// Orders all work submitted to wgpu's queue from now on after all work submitted before:
    /// an empty submission signals the GPU timeline, and wgpu's next submission waits for
    /// that value at every stage. A semaphore signal and wait carry a full memory
    /// dependency, so this orders accesses to any buffer, whichever wgpu wrapper reached it.
    pub fn gpu_barrier(&self, queue: &wgpu::Queue) {
        let value = self.gpu_done(queue);
        // SAFETY: as in `gpu_waits_for_bind`; the value was submitted to be signaled above.
        if let Some(hal) = unsafe { queue.as_hal::<Vulkan>() } {
            hal.add_wait_semaphore(self.gpu, Some(value), vk::PipelineStageFlags::ALL_COMMANDS);
        }
    }

    /// The bind timeline's state. Taken after the bind queue's gate where both are held,
    /// and never held while calling into wgpu (whose submissions take it through the gate).
    pub fn line(&self) -> MutexGuard<'_, BindLine> {
        self.line.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The GPU timeline semaphore.
    pub fn gpu(&self) -> vk::Semaphore {
        self.gpu
    }

    /// Blocks until the bind timeline reaches `value`.
    pub fn wait_for_bind(&self, raw: &ash::Device, value: u64) -> Result<(), SparseError> {
        if value == 0 {
            return Ok(());
        }
        let semaphores = [self.binds];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        // SAFETY: a wait on this device's own semaphore.
        unsafe { raw.wait_semaphores(&info, u64::MAX) }
            .map_err(SparseError::vulkan("vkWaitSemaphores"))
    }

    /// The bind timeline's value now: every bind up to it has been applied. Does not block.
    pub fn binds_applied(&self, raw: &ash::Device) -> Result<u64, SparseError> {
        // SAFETY: a query of this device's own timeline semaphore.
        unsafe { raw.get_semaphore_counter_value(self.binds) }
            .map_err(SparseError::vulkan("vkGetSemaphoreCounterValue"))
    }

    /// Destroys both semaphores; the device must be idle.
    pub fn destroy(&self, raw: &ash::Device) {
        // SAFETY: called as the device is destroyed, once no queue uses them.
        unsafe {
            raw.destroy_semaphore(self.binds, None);
            raw.destroy_semaphore(self.gpu, None);
        }
    }
}
