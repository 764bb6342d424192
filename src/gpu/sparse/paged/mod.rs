//! Pages-mode memory of one pool: address ranges, the chunks behind them, and the binds
//! that connect the two.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use ash::vk;

use super::chunks::{ChunkPolicy, Chunks, PhysicalRun};
use super::counters::{PagedCounters, PagedUsage};
use super::device::SparseDevice;
use super::error::SparseError;
use super::open::{NoPageMapping, sparse_device};
use super::page_plan::{self, Extents};
use super::range::{SparseRange, check_usage};
use bind::{BindKind, unbinds};

mod bind;
mod map;

struct RangeState {
    range: SparseRange,
    /// Bound extents: offset in the range -> the physical pages behind it.
    mapped: Extents,
    /// Spare extents: bound, but not mapped for any block (see [`PagedMemory::map`]).
    spare: Extents,
}

/// The pages-mode memory of one pool: sparse ranges (each one `wgpu::Buffer`) and the
/// device memory chunks whose pages are bound into them.
///
/// Guarantees:
/// - a map is at most one `vkQueueBindSparse` (or a share of one, with
///   [`set_bind_batch`](Self::set_bind_batch)), and work submitted after it returns sees the
///   pages (the GPU waits for the bind, or the CPU did);
/// - a map may bind *spare* pages right after its end, from memory already in chunks (at
///   most a preferred chunk, [`ChunkPolicy`]): a later map there takes them with no driver
///   call. Spare pages are never used by GPU work; a map elsewhere that needs their memory
///   unbinds them in its own call, and [`release_idle`](Self::release_idle) unbinds them
///   where they alone keep a chunk from being freed. They count as unmapped, not mapped
///   ([`PagedUsage::spare_bytes`]);
/// - an unmap unbinds only after every submission made before it has finished on the GPU
///   (the GPU waits, or the CPU first), in one call or a share of one; its memory stays in
///   its chunk for reuse until [`release_idle`](Self::release_idle), and a later map of it
///   is bound after the unbind;
/// - a failed call changes nothing: a failed allocation is
///   [`SparseError::OutOfMemory`], never a panic;
/// - device memory in chunks and in the reserve never exceeds the limit set with
///   [`set_limit`](Self::set_limit);
/// - with a reserve ([`set_reserve`](Self::set_reserve)), chunks are allocated ahead of
///   demand on a thread of the memory's own, and a map that needs memory takes them before
///   allocating on its own thread. The reserve counts as device memory
///   ([`PagedUsage::device_bytes`]), is freed by [`release_idle`](Self::release_idle), and
///   its thread is joined and its chunks freed when the memory is dropped. Its failures are
///   never a map's: a map allocates what the reserve does not cover itself.
pub struct PagedMemory {
    sparse: SparseDevice,
    device: wgpu::Device,
    queue: wgpu::Queue,
    usage: wgpu::BufferUsages,
    label: String,
    ranges: Vec<Option<RangeState>>,
    chunks: Chunks,
    limit: Option<u64>,
    mapped_bytes: u64,
    spare_bytes: u64,
    range_bytes: u64,
    counters: PagedCounters,
    /// Whether wgpu accepted buffers of `usage` (checked before the first range).
    usage_checked: bool,
    /// wgpu's `max_buffer_size` on the device: every range is a wgpu buffer.
    max_buffer_size: u64,
    /// Counts the submission points of the device's work on this memory (see
    /// [`set_work_clock`](Self::set_work_clock)); `None`: not known.
    work_clock: Option<Arc<AtomicU64>>,
    /// The work clock when the last "all earlier GPU work done" signal for an unbind was
    /// submitted, and the signal's value.
    last_unbind_signal: Option<(u64, u64)>,
    /// Maps queued on the device before their binds reach the driver in one call (1: each
    /// map binds in a call of its own).
    bind_batch: usize,
}

impl PagedMemory {
    /// Pages-mode memory on `device` for ranges of `usage`. Fails when the device cannot
    /// map pages (see [`sparse_device`]).
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        usage: wgpu::BufferUsages,
        label: &str,
        policy: ChunkPolicy,
    ) -> Result<PagedMemory, NoPageMapping> {
        let sparse = sparse_device(device)?;
        Ok(PagedMemory::on(sparse, device, queue, usage, label, policy))
    }

    /// Pages-mode memory for ranges of `usage` on `device`, whose page mapping `sparse` is
    /// (from [`sparse_device`]).
    pub fn on(
        sparse: SparseDevice,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        usage: wgpu::BufferUsages,
        label: &str,
        policy: ChunkPolicy,
    ) -> PagedMemory {
        let page = sparse.page_size();
        PagedMemory {
            chunks: Chunks::new(page, policy, sparse.facts().heap_size),
            sparse,
            device: device.clone(),
            queue: queue.clone(),
            usage,
            label: label.to_string(),
            ranges: Vec::new(),
            limit: None,
            mapped_bytes: 0,
            spare_bytes: 0,
            range_bytes: 0,
            counters: PagedCounters::default(),
            usage_checked: false,
            max_buffer_size: device.limits().max_buffer_size,
            work_clock: None,
            last_unbind_signal: None,
            bind_batch: 1,
        }
    }

    /// Tells the memory when work that may use its pages is submitted: `points` grows at or
    /// after the submission of any GPU work on the memory's blocks (the pool's submission
    /// points and its own transfers count it). An unbind must wait, on the GPU, for the work
    /// that used its pages; with the clock, an unbind while it has not moved since the last
    /// unbind's signal waits for that signal instead of submitting another one. Without it,
    /// every unbind submits its own.
    pub fn set_work_clock(&mut self, points: Arc<AtomicU64>) {
        self.work_clock = Some(points);
    }

    /// The device's page mapping facts.
    pub fn sparse(&self) -> &SparseDevice {
        &self.sparse
    }

    /// wgpu's `max_buffer_size` on the device.
    pub(crate) fn max_buffer_size(&self) -> u64 {
        self.max_buffer_size
    }

    /// The size of the address ranges a pool reserves for blocks that fit in one
    /// ([`SparseFacts::range_size`](super::SparseFacts::range_size)): 64 MiB on lavapipe
    /// (2 GiB of address space), 4 GiB less 2 MiB on an H100 (wgpu's largest buffer). A
    /// larger block gets a range of its own size, up to [`max_range`](Self::max_range).
    pub fn range_size(&self) -> u64 {
        self.sparse.facts().range_size(self.max_buffer_size)
    }

    /// The largest range the pool can reserve, hence its largest block in pages mode
    /// ([`SparseFacts::max_range`](super::SparseFacts::max_range)): 2 GiB - 4 KiB on
    /// lavapipe. Such a range is reserved only when the address space has room for it
    /// beside every other pool's.
    pub fn max_range(&self) -> u64 {
        self.sparse.facts().max_range(self.max_buffer_size)
    }

    /// The page size: every offset and length of a map or unmap is a multiple of it.
    pub fn page_size(&self) -> u64 {
        self.sparse.page_size()
    }

    /// Caps the device memory in chunks and in the reserve (for
    /// `per_process_memory_fraction` and `memory_limit_mb`); `None` removes the cap. A
    /// reserve that the new cap leaves no room for is freed.
    pub fn set_limit(&mut self, limit: Option<u64>) {
        self.limit = limit;
        if limit.is_some_and(|l| self.chunks.device_bytes() > l) {
            self.chunks.release_reserve();
        }
    }

    /// Keeps memory allocated ahead of demand, on a thread of this memory's own, so that
    /// maps that need memory normally take a ready chunk instead of waiting for
    /// `vkAllocateMemory` (0, the default here: none). After each map that needed a new
    /// chunk, chunks are ordered until the free pages and the reserve together hold a
    /// preferred chunk ([`ChunkPolicy::chunk_size`], what the pool may leave unused anyway)
    /// plus `chunks` times the preferred chunk without the device's floor (1/`divisor` of
    /// the memory in chunks, within `min_chunk..=max_chunk`): that is all the memory it
    /// holds beyond the bound [`ChunkPolicy`] guarantees without a reserve. Each chunk is at
    /// most a preferred chunk, and none is ordered beyond the limit.
    pub fn set_reserve(&mut self, chunks: u32) {
        self.chunks.set_reserve(chunks);
    }

    /// Lets up to `binds` maps and unmaps wait on the device for one `vkQueueBindSparse`
    /// together (1, the default here, or 0: every bind is a call of its own). Only where
    /// binds are ordered on the GPU ([`SparseDevice::orders_on_gpu`]); elsewhere every map
    /// binds and waits at once, and every unmap waits for the GPU and then binds.
    ///
    /// Guarantees: queued binds are submitted in the order they were made, before any wgpu
    /// submission on the device (wgpu's `vkQueueSubmit` goes through the queue's gate, which
    /// submits the queue first), before the CPU waits for binds (a chunk freed, address
    /// space wanted back, the memory dropped), and once `binds` of them have gathered;
    /// work submitted after a map returned waits for its bind on the GPU, and a queued unmap
    /// waits on the GPU for the work submitted before it, as an unmap in a call of its own
    /// does. Should a submission of the queue fail, the wgpu submission that carried it fails
    /// with the driver's error instead of running without the pages, and the binds stay
    /// queued.
    pub fn set_bind_batch(&mut self, binds: u32) {
        self.bind_batch = (binds as usize).max(1);
    }

    /// Submits the binds queued on the device now (see
    /// [`set_bind_batch`](Self::set_bind_batch)), counted as this memory's bind call,
    /// instead of at the next wgpu submission or wait for binds.
    ///
    /// # Errors
    ///
    /// The driver's error; the binds stay queued.
    pub fn submit_queued_binds(&mut self) -> Result<(), SparseError> {
        let start = Instant::now();
        let submitted = self.sparse.submit_queued();
        self.counters.bind_time += start.elapsed();
        self.counters.bind_calls += u64::from(submitted?);
        Ok(())
    }

    /// Counters of driver work so far.
    pub fn counters(&self) -> PagedCounters {
        let mut counters = self.counters;
        counters.chunks = self.chunks.counters();
        counters
    }

    /// The memory in use now.
    pub fn usage(&self) -> PagedUsage {
        PagedUsage {
            device_bytes: self.chunks.device_bytes(),
            reserve_bytes: self.chunks.reserve_bytes(),
            mapped_bytes: self.mapped_bytes,
            spare_bytes: self.spare_bytes,
            range_bytes: self.range_bytes,
            ranges: self.ranges.iter().flatten().count(),
            chunks: self.chunks.count(),
        }
    }

    /// Reserves range `id` of `size` bytes (a multiple of the page size) with no page
    /// mapped. `id` must not be live.
    ///
    /// Before the first range, wgpu is asked whether it accepts buffers of the pool's usage
    /// (it does not check the usages of buffers wrapped from Vulkan): a usage it refuses is
    /// [`SparseError::Gpu`] with wgpu's validation error, on every call until one succeeds.
    pub fn reserve_range(&mut self, id: u32, size: u64) -> Result<(), SparseError> {
        let slot = id as usize;
        if self.ranges.get(slot).is_some_and(Option::is_some) {
            return Err(SparseError::Invalid(format!(
                "range {id} is already reserved"
            )));
        }
        if !self.usage_checked {
            let start = Instant::now();
            let checked = check_usage(&self.device, self.usage, self.page_size());
            self.counters.range_time += start.elapsed();
            checked?;
            self.usage_checked = true;
        }
        let facts = self.sparse.facts();
        let start = Instant::now();
        let retiring = self.sparse.retire_applied();
        self.counters.range_time += start.elapsed();
        let mut reserved = self.sparse.inner.reserve_address_space(size);
        if !reserved && retiring {
            // Released ranges (of any pool on the device) hold their address space until
            // the binds into them have been applied.
            self.apply_all_binds()?;
            reserved = self.sparse.inner.reserve_address_space(size);
        }
        if !reserved {
            return Err(SparseError::AddressSpace {
                requested: size,
                in_use: self.sparse.inner.address_space_in_use(),
                total: facts.address_space,
            });
        }
        let start = Instant::now();
        let label = format!("{} range {id}", self.label);
        let made = if self.sparse.refuse_range_on_purpose() {
            Err(SparseError::OutOfMemory {
                bytes: size,
                result: vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            })
        } else {
            SparseRange::new(&self.sparse, &self.device, size, self.usage, &label)
        };
        self.counters.range_time += start.elapsed();
        let range = match made {
            Ok(range) => range,
            Err(error) => {
                self.sparse.inner.release_address_space(size);
                return Err(match error {
                    // Only the buffer is created here: no memory was asked for.
                    SparseError::OutOfMemory { result, .. } => SparseError::RangeRefused {
                        requested: size,
                        in_use: self.sparse.inner.address_space_in_use(),
                        total: facts.address_space,
                        result,
                    },
                    other => other,
                });
            }
        };
        self.counters.ranges_created += 1;
        if self.ranges.len() <= slot {
            self.ranges.resize_with(slot + 1, || None);
        }
        self.ranges[slot] = Some(RangeState {
            range,
            mapped: BTreeMap::new(),
            spare: BTreeMap::new(),
        });
        self.range_bytes += size;
        Ok(())
    }

    /// Releases range `id`: unmaps what is still mapped (after the GPU work that used it;
    /// the memory stays in its chunks). Its buffer and address space are given back once the binds
    /// into it have been applied; the CPU does not wait for them.
    pub fn release_range(&mut self, id: u32) -> Result<(), SparseError> {
        let mapped: Vec<(u64, u64)> = self
            .range(id)?
            .mapped
            .iter()
            .map(|(&offset, run)| (offset, run.pages as u64 * self.page_size()))
            .collect();
        if !mapped.is_empty() {
            self.unmap(id, &mapped)?;
        }
        self.reclaim_spare(Some(id))?;
        let start = Instant::now();
        let state = self.ranges[id as usize].take().expect("checked live");
        self.range_bytes -= state.range.size();
        // Binds into the range may still be pending: its Vulkan buffer outlives them (and
        // keeps its address space) while its wgpu wrappers are destroyed now.
        self.sparse.retire_after_binds(state.range.retire());
        self.counters.range_time += start.elapsed();
        self.counters.ranges_released += 1;
        Ok(())
    }

    /// The wgpu buffer of live range `id`.
    pub fn buffer(&self, id: u32) -> Option<&wgpu::Buffer> {
        self.ranges
            .get(id as usize)?
            .as_ref()
            .map(|state| state.range.buffer())
    }

    /// Another wgpu buffer over range `id`: the same Vulkan buffer and memory, tracked apart
    /// by wgpu, so dispatches on blocks reached through different wrappers get no barrier
    /// between them. wgpu then orders nothing between accesses to the same bytes through
    /// two wrappers: the caller must reach any given byte through one wrapper only (or order
    /// the accesses itself, for example by separate submissions waited on). Destroyed with
    /// the range.
    pub fn alias_buffer(&mut self, id: u32) -> Result<wgpu::Buffer, SparseError> {
        self.range(id)?;
        let label = format!("{} range {id} alias", self.label);
        let state = self.ranges[id as usize].as_mut().expect("checked live");
        let start = Instant::now();
        let buffer = state.range.alias(&self.device, &label);
        self.counters.range_time += start.elapsed();
        self.counters.wrappers_created += 1;
        Ok(buffer)
    }

    /// Orders every GPU submission made from now on after every submission made before,
    /// with a full memory dependency, whatever buffers or wrappers they use. Where the
    /// device orders binds on the GPU (timeline semaphores), the CPU does not wait: an empty
    /// submission signals the GPU timeline and wgpu's next submission waits for it. Elsewhere
    /// the CPU waits until the GPU has finished everything submitted so far.
    ///
    /// Commands recorded but not yet submitted are not covered.
    pub fn order_after_submitted(&mut self) {
        let start = Instant::now();
        match self.sparse.inner.timelines.as_ref() {
            Some(timelines) => timelines.gpu_barrier(&self.queue),
            None => {
                let index = self.queue.submit(std::iter::empty());
                // A device lost or timed out leaves nothing running to wait for.
                let _ = self.device.poll(wgpu::PollType::Wait {
                    submission_index: Some(index),
                    timeout: None,
                });
            }
        }
        self.counters.orderings += 1;
        self.counters.ordering_time += start.elapsed();
    }

    /// Whether every page of `offset..offset + len` of range `id` is mapped.
    pub fn is_mapped(&self, id: u32, offset: u64, len: u64) -> bool {
        self.range(id)
            .is_ok_and(|state| page_plan::covers(&state.mapped, self.page_size(), offset, len))
    }

    /// Frees chunks with no page in use, largest first, as long as the total stays at most
    /// `bytes`; returns the bytes freed. Unbound pages of chunks that are partly in use stay.
    ///
    /// Where this frees a chunk or leaves none, the reserve is freed as well (see
    /// [`release_reserve`](Self::release_reserve)), outside `bytes` and the bytes returned:
    /// the pool is giving memory back, not growing. A call that frees no chunk while some
    /// are in use keeps it, so that releases in the middle of a workload do not free and
    /// allocate it again and again.
    pub fn release_idle(&mut self, bytes: u64) -> u64 {
        let freed = self.release_chunks(bytes);
        if bytes > 0 && (freed > 0 || self.chunks.count() == 0) {
            self.release_reserve();
        }
        freed
    }

    /// Frees the reserve ([`set_reserve`](Self::set_reserve)): drops the chunks ordered and
    /// not started, waits for one being allocated, and frees every chunk allocated ahead;
    /// returns the bytes freed. The reserve fills again after the next chunk a map needs.
    pub fn release_reserve(&mut self) -> u64 {
        self.chunks.release_reserve()
    }

    /// [`release_idle`](Self::release_idle) without the reserve.
    fn release_chunks(&mut self, bytes: u64) -> u64 {
        if bytes > 0 && self.spare_keeps_a_chunk() {
            // Spare pages alone keep a chunk in use; a failure leaves them where they are.
            let _ = self.reclaim_spare(None);
        }
        if bytes > 0 && self.chunks.has_idle() {
            // Binds of the chunks' pages (unbinds, and maps the unbinds undo) may still be
            // queued, or pending on the GPU. Where they cannot be sent, nothing is freed: a
            // queued map would name freed memory.
            if let Err(error) = self.apply_all_binds() {
                log::warn!(
                    "{}: idle device memory kept: its queued binds could not be applied: {error}",
                    self.label
                );
                return 0;
            }
        }
        self.chunks.release_idle(&self.sparse, bytes)
    }

    /// Sends the binds queued on the device (counted as this pool's call), waits until every
    /// bind submitted so far has been applied, and lets released ranges' buffers go (their
    /// binds are applied now).
    ///
    /// # Errors
    ///
    /// The driver's error, from the submission or the wait; released ranges stay then.
    fn apply_all_binds(&mut self) -> Result<(), SparseError> {
        self.submit_queued_binds()?;
        let start = Instant::now();
        let waited = self.sparse.wait_for_binds();
        self.counters.unmap_wait_time += start.elapsed();
        waited?;
        let start = Instant::now();
        self.sparse.retire_applied();
        self.counters.range_time += start.elapsed();
        Ok(())
    }

    /// The peak of device memory in chunks.
    pub fn device_bytes_peak(&self) -> u64 {
        self.chunks.device_bytes_peak()
    }

    /// Blocks until every bind submitted so far (by any pool on the device) has been applied
    /// on the GPU. Maps and unmaps return before that where the device orders binds on the
    /// GPU ([`SparseDevice::orders_on_gpu`]); work submitted after them waits on the GPU, so
    /// nothing needs this but measurements.
    pub fn wait_for_binds(&self) -> Result<(), SparseError> {
        self.sparse.wait_for_binds()
    }

    /// Blocks until the chunks ordered for the reserve ([`set_reserve`](Self::set_reserve))
    /// are allocated, or their allocation failed. Maps take ready chunks and wait for
    /// ordered ones themselves, so nothing needs this but tests and measurements.
    pub fn settle_reserve(&self) {
        self.chunks.settle_reserve();
    }

    /// Bytes in chunks that no map uses: pages bound nowhere and spare pages.
    pub fn idle_bytes(&self) -> u64 {
        self.chunks.free_bytes() + self.spare_bytes
    }

    /// Whether some chunk has no page taken but spare ones, so that unbinding the spare
    /// pages would let it be freed.
    fn spare_keeps_a_chunk(&self) -> bool {
        // Without allocating: no chunk can be kept by spare pages alone when there are none,
        // or when every chunk in use has more pages taken than all spare pages together.
        let spare_pages = self.spare_bytes / self.page_size();
        if spare_pages == 0 || !self.chunks.some_taken_at_most(spare_pages) {
            return false;
        }
        let mut spare_per_chunk: BTreeMap<u32, u64> = BTreeMap::new();
        for state in self.ranges.iter().flatten() {
            for run in state.spare.values() {
                *spare_per_chunk.entry(run.chunk).or_default() += u64::from(run.pages);
            }
        }
        spare_per_chunk
            .into_iter()
            .any(|(chunk, spare)| self.chunks.taken_pages(chunk) == spare)
    }

    /// Unbinds the spare pages of range `only` (every range for `None`) in one call and
    /// returns their memory to the chunks. No GPU work used them, so nothing is waited for.
    fn reclaim_spare(&mut self, only: Option<u32>) -> Result<(), SparseError> {
        let page = self.page_size();
        let mut calls: Vec<(u32, Vec<(u64, PhysicalRun)>)> = Vec::new();
        for (id, state) in self.ranges.iter().enumerate() {
            let Some(state) = state else { continue };
            if only.is_some_and(|only| only as usize != id) || state.spare.is_empty() {
                continue;
            }
            calls.push((
                id as u32,
                state.spare.iter().map(|(&o, &r)| (o, r)).collect(),
            ));
        }
        if calls.is_empty() {
            return Ok(());
        }
        let entries: Vec<(u32, Vec<vk::SparseMemoryBind>)> = calls
            .iter()
            .map(|(id, runs)| {
                let binds = unbinds(runs.iter().map(|&(o, r)| (o, r.pages as u64 * page)));
                (*id, binds)
            })
            .collect();
        self.submit_bind_call(&entries, BindKind::Reclaim)?;
        for (id, runs) in calls {
            let state = self.ranges[id as usize].as_mut().expect("listed live");
            state.spare.clear();
            for (_, run) in runs {
                self.spare_bytes -= run.pages as u64 * page;
                self.chunks.give(run);
            }
        }
        Ok(())
    }

    fn range(&self, id: u32) -> Result<&RangeState, SparseError> {
        self.ranges
            .get(id as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| SparseError::Invalid(format!("range {id} is not reserved")))
    }
}

impl Drop for PagedMemory {
    fn drop(&mut self) {
        // Every block is gone; wait for the work that used them and for pending binds, then
        // give everything back.
        self.wait_for_gpu();
        if self.sparse.wait_for_binds().is_err() {
            // The queue could not be submitted: its binds into this memory's ranges, and of
            // its chunks into any range (a released one among them), would name buffers and
            // memory freed below, so they never reach the driver.
            let buffers: Vec<vk::Buffer> = self
                .ranges
                .iter()
                .flatten()
                .map(|state| state.range.raw())
                .collect();
            self.sparse.forget_queued(&buffers, &self.chunks.memories());
        }
        for state in self.ranges.drain(..).flatten() {
            self.sparse.inner.release_address_space(state.range.size());
        }
        self.sparse.retire_applied();
        self.chunks.free_all(&self.sparse);
    }
}

impl std::fmt::Debug for PagedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagedMemory")
            .field("usage", &self.usage())
            .finish_non_exhaustive()
    }
}
