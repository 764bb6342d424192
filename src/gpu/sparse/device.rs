//! A device that can map pages: its Vulkan handles, the queue binds go to, and the facts the
//! pool sizes ranges and chunks from.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use ash::vk;

use super::error::SparseError;
use super::gate::QueueGate;
use super::range::RetiringRange;
use super::timeline::{BindLine, Timelines};

/// Page mapping on one device: a cheap handle, shared by every pool on the device.
///
/// Obtained from [`sparse_device`](super::sparse_device) for a device that
/// [`request_device`](super::request_device) opened with sparse binding enabled.
#[derive(Clone)]
pub struct SparseDevice {
    pub(crate) inner: Arc<SparseDeviceInner>,
}

pub(crate) struct SparseDeviceInner {
    /// The driver's own function table (not the gated one wgpu has).
    pub raw: ash::Device,
    /// Instance functions, for memory budget queries.
    pub instance: ash::Instance,
    pub physical_device: vk::PhysicalDevice,
    /// The queue binds are submitted to, and its lock.
    pub bind_queue: vk::Queue,
    pub gate: Arc<QueueGate>,
    pub facts: SparseFacts,
    /// Fences ready for reuse (unsignaled).
    fences: Mutex<Vec<vk::Fence>>,
    /// Address space reserved by the ranges of every pool on the device.
    address_reserved: AtomicU64,
    /// Chunks of device memory allocated by the pools on the device and not freed yet.
    live_chunks: AtomicU64,
    /// Timeline semaphores that order binds with the GPU, where the device has them;
    /// without them every bind waits on a fence and every unmap for the GPU.
    pub timelines: Option<Timelines>,
    /// Released ranges of every pool whose buffers wait for binds into them: the bind
    /// timeline value to reach, and the buffer. Each keeps its address space until then.
    retiring: Mutex<Vec<(u64, RetiringRange)>>,
    /// Calls that submitted queued binds for wgpu's submissions.
    flushes_at_submit: AtomicU64,
    /// Bind submissions still to fail on purpose ([`SparseDevice::fail_next_bind_submissions`]).
    failing_binds: AtomicU64,
    /// Range creations still to refuse on purpose ([`SparseDevice::fail_next_range_creations`]).
    failing_ranges: AtomicU64,
}

/// What a device offers for page mapping, read once when it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SparseFacts {
    /// The page: a sparse buffer's memory alignment. Binds are whole pages.
    pub page_size: u64,
    /// The sparse address space all ranges of the device together fit in:
    /// `sparseAddressSpaceSize`, or half of it on NVIDIA, whose driver fails (and may crash)
    /// before the figure it reports is used up.
    pub address_space: u64,
    /// `sparseAddressSpaceSize` as the driver reports it.
    pub reported_address_space: u64,
    /// The largest single range (`maxBufferSize` where the device reports it).
    pub max_range_size: u64,
    /// Whether binds go to a queue of the pool's own (else they share wgpu's queue through
    /// its gate).
    pub own_queue: bool,
    /// The memory type chunks are allocated from.
    pub memory_type: u32,
    /// The heap of that memory type, in bytes.
    pub heap_size: u64,
    /// The heap's index.
    pub heap_index: u32,
    /// Whether `VK_EXT_memory_budget` is enabled, so heap usage can be read.
    pub memory_budget: bool,
}

/// How many ranges of the usual size the device's address space holds: it is shared by
/// every pool on the device and both kinds of each (small and large blocks), so that 16
/// pools find room (lavapipe: 2 GiB of address space, ranges of 64 MiB).
const RANGES_PER_ADDRESS_SPACE: u64 = 32;

impl SparseFacts {
    /// The largest range a pool can reserve, hence its largest block in pages mode: the
    /// device's largest buffer (Vulkan's `maxBufferSize` and wgpu's `max_buffer_size`, given
    /// as `max_buffer_size`) within its sparse address space, rounded down to the page and
    /// at least one page. 2 GiB - 4 KiB on lavapipe.
    pub fn max_range(&self, max_buffer_size: u64) -> u64 {
        let page = self.page_size;
        let size = self.max_range_size.min(max_buffer_size);
        (size / page * page).max(page)
    }

    /// The size of the address ranges a pool reserves for blocks that fit in one: a 32nd of
    /// the sparse address space (every pool on the device shares it), no more than the
    /// device memory rounded up to a power of two (a larger range could never be filled)
    /// nor than [`max_range`](Self::max_range); a whole number of pages, at least one.
    /// 64 MiB on lavapipe (2 GiB of address space); on an H100 or H200 (512 GiB of the
    /// reported 1 TiB) the largest buffer, 4 GiB less 2 MiB, bounds it.
    pub fn range_size(&self, max_buffer_size: u64) -> u64 {
        let page = self.page_size;
        let share = self.address_space / RANGES_PER_ADDRESS_SPACE;
        let memory = self
            .heap_size
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX);
        let size = self.max_range(max_buffer_size).min(share).min(memory);
        (size / page * page).max(page)
    }
}

impl SparseDevice {
    /// The facts pools size their ranges and chunks from.
    pub fn facts(&self) -> SparseFacts {
        self.inner.facts
    }

    /// Whether binds are ordered with GPU work on the GPU (timeline semaphores): a map or an
    /// unmap then never makes the CPU wait. Without, every bind waits on a fence and every
    /// unmap first waits for the GPU to finish the work submitted before it.
    pub fn orders_on_gpu(&self) -> bool {
        self.inner.timelines.is_some()
    }

    /// The page size in bytes.
    pub fn page_size(&self) -> u64 {
        self.inner.facts.page_size
    }

    /// This process's usage of the chunk memory's heap, from `VK_EXT_memory_budget`; `None`
    /// without the extension. Counts every allocation on the heap, wgpu's own included.
    pub fn heap_usage(&self) -> Option<u64> {
        let inner = &self.inner;
        if !inner.facts.memory_budget {
            return None;
        }
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut properties = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: the device was opened with VK_EXT_memory_budget on this physical device,
        // and its instance is Vulkan 1.1 or newer (checked when opening), so the core query
        // exists and the chained structure is valid.
        unsafe {
            inner
                .instance
                .get_physical_device_memory_properties2(inner.physical_device, &mut properties)
        };
        Some(budget.heap_usage[inner.facts.heap_index as usize])
    }

    pub(crate) fn raw(&self) -> &ash::Device {
        &self.inner.raw
    }

    /// `VkDeviceMemory` chunks that pools in pages mode on this device have allocated and
    /// not freed, from any thread (a reserve's included). Zero once every pool is dropped.
    pub fn live_chunks(&self) -> u64 {
        self.inner.live_chunks.load(Ordering::Acquire)
    }

    /// Allocates a chunk of `bytes` of the chunk memory type. Any thread may call it: the
    /// device needs no external synchronization for allocations.
    pub(crate) fn allocate_chunk(&self, bytes: u64) -> Result<vk::DeviceMemory, vk::Result> {
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(bytes)
            .memory_type_index(self.inner.facts.memory_type);
        // SAFETY: a plain allocation of a memory type of this device.
        let memory = unsafe { self.inner.raw.allocate_memory(&info, None) }?;
        self.inner.live_chunks.fetch_add(1, Ordering::AcqRel);
        Ok(memory)
    }

    /// Frees a chunk from [`allocate_chunk`](Self::allocate_chunk).
    ///
    /// # Safety
    ///
    /// `memory` came from `allocate_chunk` on this device and is freed once; no bind into a
    /// range that is still used, and no GPU work, uses it any more.
    pub(crate) unsafe fn free_chunk(&self, memory: vk::DeviceMemory) {
        // SAFETY: as the caller promised.
        unsafe { self.inner.raw.free_memory(memory, None) };
        self.inner.live_chunks.fetch_sub(1, Ordering::AcqRel);
    }

    /// The device's timelines; only called where binds are ordered on the GPU.
    pub(crate) fn timelines(&self) -> &Timelines {
        self.inner
            .timelines
            .as_ref()
            .expect("binds are queued and ordered on the GPU only with timelines")
    }

    /// Submits one batch of buffer binds in a single `vkQueueBindSparse`, ordered after every
    /// earlier bind and, with `after_gpu`, after the GPU timeline reaches that value; the
    /// binds queued on the device go first, as earlier batches of the same call. Returns the
    /// bind timeline value the batch signals and the calls made (1). Nothing waits on the
    /// CPU. Needs timelines.
    ///
    /// # Errors
    ///
    /// The driver's error: then neither the queued binds nor `binds` were submitted (the
    /// queued binds stay queued).
    pub(crate) fn bind_ordered(
        &self,
        binds: &[vk::SparseBufferMemoryBindInfo<'_>],
        after_gpu: Option<u64>,
    ) -> Result<(u64, u64), SparseError> {
        let _held = self.inner.gate.hold();
        let value =
            self.submit_queue_and(&mut self.timelines().line(), Some((binds, after_gpu)))?;
        Ok((value, 1))
    }

    /// Submits the queued binds, if any, with the bind queue held through its gate and the
    /// bind timeline's state locked (`line`); returns whether there were. On failure they
    /// stay queued.
    pub(crate) fn submit_queued_held(&self, line: &mut BindLine) -> Result<bool, SparseError> {
        if line.queued.is_empty() {
            return Ok(false);
        }
        self.submit_queue_and(line, None).map(|_| true)
    }

    /// One `vkQueueBindSparse` of the queued binds' batches and then `last`, if any (binds
    /// and the GPU timeline value they wait for); returns the value the call's last batch
    /// signals. The bind queue is held through its gate and `line` locked. On failure the
    /// queued binds stay queued.
    fn submit_queue_and(
        &self,
        line: &mut BindLine,
        last: Option<(&[vk::SparseBufferMemoryBindInfo<'_>], Option<u64>)>,
    ) -> Result<u64, SparseError> {
        let queued = std::mem::take(&mut line.queued);
        let queued_infos = queued.infos();
        let batches: Vec<(&[vk::SparseBufferMemoryBindInfo<'_>], Option<u64>)> = queued_infos
            .iter()
            .map(|(infos, wait)| (infos.as_slice(), *wait))
            .chain(last)
            .collect();
        let submitted = self.submit_held(line, &batches);
        if submitted.is_err() {
            drop(batches);
            drop(queued_infos);
            line.queued = queued;
        }
        submitted
    }

    /// One `vkQueueBindSparse` of `batches` (the binds of each, and the GPU timeline value
    /// it waits for, if any), in order: each waits for the bind timeline value before it and
    /// signals the next; returns the last batch's value. The bind queue is held through its
    /// gate and `line` locked.
    fn submit_held(
        &self,
        line: &mut BindLine,
        batches: &[(&[vk::SparseBufferMemoryBindInfo<'_>], Option<u64>)],
    ) -> Result<u64, SparseError> {
        let inner = &self.inner;
        let timelines = self.timelines();
        let first = line.last;
        let waits: Vec<(Vec<vk::Semaphore>, [u64; 2])> = batches
            .iter()
            .zip(first..)
            .map(|(&(_, after_gpu), previous)| match after_gpu {
                Some(gpu) => (vec![timelines.binds, timelines.gpu()], [previous, gpu]),
                None => (vec![timelines.binds], [previous, 0]),
            })
            .collect();
        let signals: Vec<[u64; 1]> = (first + 1..).take(batches.len()).map(|v| [v]).collect();
        let signal_semaphores = [timelines.binds];
        let mut values: Vec<vk::TimelineSemaphoreSubmitInfo<'_>> = waits
            .iter()
            .zip(&signals)
            .map(|((semaphores, wait_values), signal)| {
                vk::TimelineSemaphoreSubmitInfo::default()
                    .wait_semaphore_values(&wait_values[..semaphores.len()])
                    .signal_semaphore_values(signal)
            })
            .collect();
        let infos: Vec<vk::BindSparseInfo<'_>> = batches
            .iter()
            .zip(&waits)
            .zip(values.iter_mut())
            .map(|((&(binds, _), (semaphores, _)), values)| {
                vk::BindSparseInfo::default()
                    .wait_semaphores(semaphores)
                    .buffer_binds(binds)
                    .signal_semaphores(&signal_semaphores)
                    .push_next(values)
            })
            .collect();
        let vulkan_error = |result| SparseError::Vulkan {
            call: "vkQueueBindSparse",
            result,
        };
        if take_one(&inner.failing_binds) {
            return Err(vulkan_error(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY));
        }
        // SAFETY: the caller holds the queue through its gate; every bind names a live
        // sparse buffer and live memory of this device; the semaphores are this device's
        // timelines, and each signaled value is above every value signaled or pending on
        // them.
        unsafe {
            inner
                .raw
                .queue_bind_sparse(inner.bind_queue, &infos, vk::Fence::null())
        }
        .map_err(vulkan_error)?;
        line.last = first + batches.len() as u64;
        Ok(line.last)
    }

    /// Counts a submission of queued binds made for a wgpu submission.
    pub(crate) fn count_submit_flush(&self) {
        self.inner.flushes_at_submit.fetch_add(1, Ordering::Relaxed);
    }

    /// `vkQueueBindSparse` calls that wgpu's submissions on the device made to submit the
    /// maps pools had queued (see `page_bind_batch`), over the device's life. A pool counts
    /// the calls it makes itself ([`PagedCounters::bind_calls`](super::PagedCounters)).
    pub fn bind_calls_at_submit(&self) -> u64 {
        self.inner.flushes_at_submit.load(Ordering::Relaxed)
    }

    /// Drops the queued binds into `buffers` and of `memories` (see
    /// [`QueuedBinds::forget`](super::batch::QueuedBinds::forget)); for a memory
    /// dropped after the submission of the queue failed.
    pub(crate) fn forget_queued(&self, buffers: &[vk::Buffer], memories: &[vk::DeviceMemory]) {
        if let Some(timelines) = &self.inner.timelines {
            timelines.line().queued.forget(buffers, memories);
        }
    }

    /// Page binds waiting in the device's queue for a shared call (`page_bind_batch`): for
    /// tests of what stays queued.
    #[doc(hidden)]
    pub fn queued_page_binds(&self) -> usize {
        self.inner
            .timelines
            .as_ref()
            .map_or(0, |timelines| timelines.line().queued.page_binds())
    }

    /// Makes the next `count` calls that submit binds ordered on the GPU (queued binds, and
    /// maps or unmaps with timelines) fail as the driver's `VK_ERROR_OUT_OF_DEVICE_MEMORY`
    /// would, without calling it: for tests of the paths that handle a failed bind
    /// submission, which no real device produces on demand.
    #[doc(hidden)]
    pub fn fail_next_bind_submissions(&self, count: u64) {
        self.inner.failing_binds.store(count, Ordering::Relaxed);
    }

    /// Makes the next `count` creations of a pool's address range fail as a driver that
    /// refuses the sparse `vkCreateBuffer` with `VK_ERROR_OUT_OF_DEVICE_MEMORY` would (as
    /// NVIDIA's does once its own address space is spent), without calling it: for tests of
    /// the refused-range path, which no device produces on demand at a small size.
    #[doc(hidden)]
    pub fn fail_next_range_creations(&self, count: u64) {
        self.inner.failing_ranges.store(count, Ordering::Relaxed);
    }

    /// Whether this range creation is to fail on purpose (counted down once).
    pub(crate) fn refuse_range_on_purpose(&self) -> bool {
        take_one(&self.inner.failing_ranges)
    }

    /// The bind timeline value of the last bind submitted (0: none), with timelines.
    pub(crate) fn last_bind(&self) -> u64 {
        self.inner.timelines.as_ref().map_or(0, |t| t.line().last)
    }

    /// Keeps a released range's buffer until every bind submitted or queued so far has been
    /// applied, then destroys it and gives its address space back, without blocking: checked here
    /// and at every [`retire_applied`](Self::retire_applied).
    pub(crate) fn retire_after_binds(&self, range: RetiringRange) {
        // Binds queued on the device (the range's own unbinds among them) are counted too:
        // the value their call will signal once the last of them is applied.
        let value = self.inner.timelines.as_ref().map_or(0, |t| {
            let line = t.line();
            line.last + line.queued.batches() as u64
        });
        lock(&self.inner.retiring).push((value, range));
        self.retire_applied();
    }

    /// Destroys the retiring buffers whose binds have been applied and gives their address
    /// space back; returns whether some still wait. Does not block.
    pub(crate) fn retire_applied(&self) -> bool {
        let mut retiring = lock(&self.inner.retiring);
        if retiring.is_empty() {
            return false;
        }
        let applied = match &self.inner.timelines {
            Some(timelines) => timelines.binds_applied(&self.inner.raw).unwrap_or(0),
            None => u64::MAX,
        };
        retiring.retain(|(value, range)| {
            let keep = *value > applied;
            if !keep {
                self.inner.release_address_space(range.size());
            }
            keep
        });
        !retiring.is_empty()
    }

    /// Submits the binds queued on the device and blocks until every bind submitted so far
    /// has been applied (with timelines; without, every bind was already waited for).
    ///
    /// # Errors
    ///
    /// The driver's error. Where the submission of the queue failed, the binds submitted
    /// before it were still waited for (the queued ones stay queued), so that memory and
    /// buffers they name may go once nothing queued names them.
    pub(crate) fn wait_for_binds(&self) -> Result<(), SparseError> {
        let submitted = self.submit_queued();
        let waited = match &self.inner.timelines {
            Some(timelines) => timelines.wait_for_bind(&self.inner.raw, self.last_bind()),
            None => Ok(()),
        };
        submitted.and(waited)
    }

    /// Submits one batch of buffer binds in a single `vkQueueBindSparse` and waits until the
    /// device has applied it. Work submitted after this returns sees the new mapping.
    pub(crate) fn bind(
        &self,
        binds: &[vk::SparseBufferMemoryBindInfo<'_>],
    ) -> Result<(), SparseError> {
        if binds.is_empty() {
            return Ok(());
        }
        let inner = &self.inner;
        let fence = self.take_fence()?;
        let info = vk::BindSparseInfo::default().buffer_binds(binds);
        let submitted = {
            let _held = inner.gate.hold();
            // SAFETY: the queue is held through its gate (no other thread submits to it now),
            // every bind names a live sparse buffer of this device and live memory of it, and
            // the fence is unsignaled and not in use.
            unsafe {
                inner
                    .raw
                    .queue_bind_sparse(inner.bind_queue, std::slice::from_ref(&info), fence)
            }
        };
        let waited = submitted.and_then(|()| {
            // SAFETY: the fence belongs to this device.
            unsafe { inner.raw.wait_for_fences(&[fence], true, u64::MAX) }
        });
        match waited {
            Ok(()) => {
                self.give_fence(fence);
                Ok(())
            }
            Err(result) => {
                // The fence's state is unknown after a failure: wait for the queue before
                // destroying it, so that it is not in use.
                let _held = inner.gate.hold();
                // SAFETY: the queue is held; the fence is then idle and destroyed once.
                unsafe {
                    let _ = inner.raw.queue_wait_idle(inner.bind_queue);
                    inner.raw.destroy_fence(fence, None);
                }
                Err(SparseError::Vulkan {
                    call: "vkQueueBindSparse",
                    result,
                })
            }
        }
    }

    fn take_fence(&self) -> Result<vk::Fence, SparseError> {
        if let Some(fence) = lock(&self.inner.fences).pop() {
            return Ok(fence);
        }
        // SAFETY: a plain fence on a live device.
        unsafe {
            self.inner
                .raw
                .create_fence(&vk::FenceCreateInfo::default(), None)
        }
        .map_err(SparseError::vulkan("vkCreateFence"))
    }

    fn give_fence(&self, fence: vk::Fence) {
        // SAFETY: the fence is signaled and no longer waited on.
        match unsafe { self.inner.raw.reset_fences(&[fence]) } {
            Ok(()) => lock(&self.inner.fences).push(fence),
            // SAFETY: nothing uses the fence any more.
            Err(_) => unsafe { self.inner.raw.destroy_fence(fence, None) },
        }
    }
}

impl std::fmt::Debug for SparseDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseDevice")
            .field("facts", &self.inner.facts)
            .finish_non_exhaustive()
    }
}

impl SparseDeviceInner {
    pub fn new(
        raw: ash::Device,
        instance: ash::Instance,
        physical_device: vk::PhysicalDevice,
        bind_queue: vk::Queue,
        gate: Arc<QueueGate>,
        facts: SparseFacts,
        timelines: Option<Timelines>,
    ) -> SparseDeviceInner {
        SparseDeviceInner {
            raw,
            instance,
            physical_device,
            bind_queue,
            gate,
            facts,
            fences: Mutex::new(Vec::new()),
            address_reserved: AtomicU64::new(0),
            live_chunks: AtomicU64::new(0),
            timelines,
            retiring: Mutex::new(Vec::new()),
            flushes_at_submit: AtomicU64::new(0),
            failing_binds: AtomicU64::new(0),
            failing_ranges: AtomicU64::new(0),
        }
    }

    /// Takes `bytes` of the device's sparse address space; `false` when they do not fit.
    pub fn reserve_address_space(&self, bytes: u64) -> bool {
        let total = self.facts.address_space;
        self.address_reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= total)
            })
            .is_ok()
    }

    /// Gives back address space taken by [`reserve_address_space`](Self::reserve_address_space).
    pub fn release_address_space(&self, bytes: u64) {
        self.address_reserved.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Address space reserved now, by every pool on the device.
    pub fn address_space_in_use(&self) -> u64 {
        self.address_reserved.load(Ordering::Acquire)
    }

    /// Destroys the retiring range buffers, the pooled fences and the timelines. Called as
    /// the device is destroyed, after every pool on it is gone (pools keep the device
    /// alive).
    pub fn destroy_sync_objects(&self) {
        // Every pool is gone and waited for its binds: the retiring buffers go first.
        for (_, range) in lock(&self.retiring).drain(..) {
            self.release_address_space(range.size());
        }
        for fence in lock(&self.fences).drain(..) {
            // SAFETY: pooled fences are idle and the device is still alive.
            unsafe { self.raw.destroy_fence(fence, None) };
        }
        if let Some(timelines) = &self.timelines {
            timelines.destroy(&self.raw);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What is known about a device that [`request_device`](super::request_device) opened.
pub(crate) enum Registered {
    /// Sparse binding is enabled.
    Sparse(SparseDevice),
    /// The device was opened without it, for this reason.
    Plain(String),
}

/// Devices opened by `request_device`, by Vulkan handle, until they are destroyed.
static DEVICES: RwLock<Vec<(vk::Device, Registered)>> = RwLock::new(Vec::new());

pub(crate) fn register(handle: vk::Device, entry: Registered) {
    DEVICES
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .push((handle, entry));
}

/// Removes `handle`'s entry and destroys what it pooled on the device.
pub(crate) fn unregister(handle: vk::Device) {
    let mut devices = DEVICES.write().unwrap_or_else(|p| p.into_inner());
    for (_, entry) in devices.iter().filter(|(h, _)| *h == handle) {
        if let Registered::Sparse(device) = entry {
            device.inner.destroy_sync_objects();
        }
    }
    devices.retain(|(h, _)| *h != handle);
}

/// The registry's entry for `handle`: the sparse device, or why there is none.
pub(crate) fn lookup(handle: vk::Device) -> Result<SparseDevice, String> {
    let devices = DEVICES.read().unwrap_or_else(|p| p.into_inner());
    match devices.iter().find(|(h, _)| *h == handle) {
        Some((_, Registered::Sparse(device))) => Ok(device.clone()),
        Some((_, Registered::Plain(reason))) => Err(reason.clone()),
        None => Err(
            "the device was not opened by wgpool::gpu::sparse::request_device, so \
                     sparse binding is not enabled on it"
                .to_string(),
        ),
    }
}

/// Counts `counter` down by one if it is above zero; whether it did. A plain load first, so
/// that the usual zero costs no locked operation.
fn take_one(counter: &AtomicU64) -> bool {
    counter.load(Ordering::Relaxed) > 0
        && counter
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn facts(
        page_size: u64,
        address_space: u64,
        max_range_size: u64,
        heap_size: u64,
    ) -> SparseFacts {
        SparseFacts {
            page_size,
            address_space,
            reported_address_space: address_space,
            max_range_size,
            own_queue: false,
            memory_type: 0,
            heap_size,
            heap_index: 0,
            memory_budget: false,
        }
    }

    /// Ranges are a 32nd of the address space, at most the device memory rounded up to a
    /// power of two and the largest range, whole pages, and never below one page.
    #[test]
    fn ranges_share_the_address_space_and_stay_whole_pages() {
        // lavapipe: 2 GiB of address space, buffers of up to 2 GiB.
        let lavapipe = facts(4096, 2 * GIB, 2 * GIB, 8 * GIB);
        assert_eq!(lavapipe.max_range(u64::MAX), 2 * GIB);
        assert_eq!(
            lavapipe.max_range(2 * GIB - 1),
            2 * GIB - 4096,
            "rounded down to pages"
        );
        assert_eq!(lavapipe.range_size(u64::MAX), 64 << 20);
        // An H200: 1 TiB of address space, 141 GiB of memory (256 GiB as a power of two).
        let h200 = facts(64 << 10, 1 << 40, 1 << 40, 141 * GIB);
        assert_eq!(h200.range_size(u64::MAX), 32 * GIB);
        // A small device: the memory, not the address space, bounds the range.
        let small = facts(4096, 1 << 40, 1 << 40, 3 * GIB);
        assert_eq!(small.range_size(u64::MAX), 4 * GIB);
        // Largest buffer below a page: still one page.
        assert_eq!(lavapipe.max_range(100), 4096);
        assert_eq!(lavapipe.range_size(100), 4096);
    }
}
