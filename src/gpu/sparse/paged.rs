//! Page-mapped memory of one pool: address ranges, the chunks behind them, and the binds
//! that connect the two.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ash::vk;

use super::chunks::{ChunkCounters, ChunkPolicy, Chunks, PhysicalRun};
use super::device::SparseDevice;
use super::error::SparseError;
use super::open::{NoPageMapping, sparse_device};
use super::range::{SparseRange, check_usage};

/// Counters of driver work, for `driver_time_s` and the bind statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct PagedCounters {
    /// Chunk allocation and freeing.
    pub chunks: ChunkCounters,
    /// `vkQueueBindSparse` calls.
    pub bind_calls: u64,
    /// Maps served wholly by spare pages already bound where they were asked for, with no
    /// driver call.
    pub maps_from_spare: u64,
    /// Bytes bound as spare pages over the memory's life.
    pub spare_bound_bytes_total: u64,
    /// Time in those calls and their fence waits, and in the empty wgpu submissions that
    /// mark the work an unbind waits for.
    pub bind_time: Duration,
    /// Ranges created.
    pub ranges_created: u64,
    /// Ranges released.
    pub ranges_released: u64,
    /// Extra wgpu wrappers made over ranges ([`alias_buffer`](PagedMemory::alias_buffer)).
    pub wrappers_created: u64,
    /// Time creating and releasing ranges (the sparse `VkBuffer` and its wgpu wrappers) and
    /// making extra wrappers over them.
    pub range_time: Duration,
    /// Time waiting for the GPU before unbinding pages, and for pending binds before a
    /// range's buffer or a chunk is given back.
    pub unmap_wait_time: Duration,
    /// Bytes bound over the memory's life.
    pub mapped_bytes_total: u64,
    /// Bytes unbound over the memory's life.
    pub unmapped_bytes_total: u64,
    /// Orderings of all later GPU work after all earlier work
    /// ([`order_after_submitted`](PagedMemory::order_after_submitted)).
    pub orderings: u64,
    /// Empty submissions that signal the GPU timeline for unbinds to wait for (at most one
    /// per unbind call; fewer where the work clock shows nothing new was submitted).
    pub unbind_signals: u64,
    /// CPU time spent in them (the GPU waits where binds are not ordered on the GPU).
    pub ordering_time: Duration,
}

impl PagedCounters {
    /// Time in the driver: memory allocation and freeing, binds, and creating and releasing
    /// ranges and their wrappers (the waits for the GPU before unbinding are not driver
    /// time).
    pub fn driver_time(&self) -> Duration {
        self.chunks.time + self.bind_time + self.range_time
    }
}

/// What the memory holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PagedUsage {
    /// Bytes of device memory in chunks.
    pub device_bytes: u64,
    /// Bytes of pages bound into ranges for blocks (maps), spare pages not included.
    pub mapped_bytes: u64,
    /// Bytes of spare pages: bound past the end of a map, for the next map there.
    pub spare_bytes: u64,
    /// Bytes of address space reserved by ranges.
    pub range_bytes: u64,
    /// Live ranges.
    pub ranges: usize,
    /// Live chunks.
    pub chunks: usize,
}

/// What a bind does, for its ordering with GPU work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BindKind {
    Map,
    Unmap,
    /// Unbinding spare pages only: no GPU work ever used them.
    Reclaim,
}

struct RangeState {
    range: SparseRange,
    /// Bound extents: offset in the range -> the physical pages behind it.
    mapped: BTreeMap<u64, PhysicalRun>,
    /// Spare extents: bound, but not mapped for any block (see [`PagedMemory::map`]).
    spare: BTreeMap<u64, PhysicalRun>,
}

/// Unbinds of `runs` (offset, bytes): the entries of a bind call.
fn unbinds(runs: impl IntoIterator<Item = (u64, u64)>) -> Vec<vk::SparseMemoryBind> {
    runs.into_iter()
        .map(|(offset, len)| {
            vk::SparseMemoryBind::default()
                .resource_offset(offset)
                .size(len)
                .memory(vk::DeviceMemory::null())
        })
        .collect()
}

/// Physical pages placed at an offset of a range.
type Placed = (u64, PhysicalRun);

/// Removes the parts of `offset..offset + len` that spare extents of `spare` cover, and
/// returns them (offset, physical pages) and the parts they do not cover (offset, bytes), in
/// order.
fn take_covered(
    spare: &mut BTreeMap<u64, PhysicalRun>,
    page: u64,
    offset: u64,
    len: u64,
) -> (Vec<Placed>, Vec<(u64, u64)>) {
    let (mut covered, mut uncovered) = (Vec::new(), Vec::new());
    let end = offset + len;
    let mut at = offset;
    while at < end {
        let holding = spare
            .range(..=at)
            .next_back()
            .map(|(&start, &run)| (start, run))
            .filter(|&(start, run)| start + run.pages as u64 * page > at);
        match holding {
            Some((start, run)) => {
                spare.remove(&start);
                let run_end = start + run.pages as u64 * page;
                let cut_start = ((at - start) / page) as u32;
                let cut_end = ((run_end.min(end) - start) / page) as u32;
                if cut_start > 0 {
                    spare.insert(
                        start,
                        PhysicalRun {
                            pages: cut_start,
                            ..run
                        },
                    );
                }
                if cut_end < run.pages {
                    spare.insert(
                        start + cut_end as u64 * page,
                        PhysicalRun {
                            chunk: run.chunk,
                            first: run.first + cut_end,
                            pages: run.pages - cut_end,
                        },
                    );
                }
                covered.push((
                    at,
                    PhysicalRun {
                        chunk: run.chunk,
                        first: run.first + cut_start,
                        pages: cut_end - cut_start,
                    },
                ));
                at = start + cut_end as u64 * page;
            }
            None => {
                let next = spare.range(at..).next().map_or(end, |(&s, _)| s.min(end));
                uncovered.push((at, next - at));
                at = next;
            }
        }
    }
    (covered, uncovered)
}

/// The page-mapped memory of one pool: sparse ranges (each one `wgpu::Buffer`) and the
/// device memory chunks whose pages are bound into them.
///
/// Guarantees:
/// - a map is at most one `vkQueueBindSparse`, and work submitted after it returns sees the
///   pages (the GPU waits for the bind, or the CPU did);
/// - a map may bind *spare* pages right after its end, from memory already in chunks (at
///   most a preferred chunk, [`ChunkPolicy`]): a later map there takes them with no driver
///   call. Spare pages are never used by GPU work; a map elsewhere that needs their memory
///   unbinds them in its own call, and [`release_idle`](Self::release_idle) unbinds them
///   where they alone keep a chunk from being freed. They count as held, not mapped
///   ([`PagedUsage::spare_bytes`]);
/// - an unmap first waits until every submission made before it has finished on the GPU,
///   then unbinds in one call; its memory stays held for reuse until
///   [`release_idle`](Self::release_idle);
/// - a failed call changes nothing: a failed allocation is
///   [`SparseError::OutOfMemory`], never a panic;
/// - device memory in chunks never exceeds the limit set with
///   [`set_limit`](Self::set_limit).
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
}

impl PagedMemory {
    /// Page-mapped memory on `device` for ranges of `usage`. Fails when the device cannot
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

    /// Page-mapped memory for ranges of `usage` on `device`, whose page mapping `sparse` is
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

    /// The size of the address ranges the engine reserves for blocks that fit in one
    /// ([`SparseFacts::range_size`](super::SparseFacts::range_size)): 64 MiB on lavapipe
    /// (2 GiB of address space), 32 GiB on an H200 (1 TiB). A larger block gets a range of
    /// its own size, up to [`max_range`](Self::max_range).
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

    /// Caps the device memory in chunks (for `per_process_memory_fraction` and
    /// `memory_limit_mb`); `None` removes the cap.
    pub fn set_limit(&mut self, limit: Option<u64>) {
        self.limit = limit;
    }

    /// Counters of driver work so far.
    pub fn counters(&self) -> PagedCounters {
        let mut counters = self.counters;
        counters.chunks = self.chunks.counters;
        counters
    }

    /// What is held now.
    pub fn usage(&self) -> PagedUsage {
        PagedUsage {
            device_bytes: self.chunks.device_bytes(),
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
            let start = Instant::now();
            let waited = self.sparse.wait_for_binds();
            self.counters.unmap_wait_time += start.elapsed();
            waited?;
            let start = Instant::now();
            self.sparse.retire_applied();
            self.counters.range_time += start.elapsed();
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
        let made = SparseRange::new(&self.sparse, &self.device, size, self.usage, &label);
        self.counters.range_time += start.elapsed();
        let range = match made {
            Ok(range) => range,
            Err(error) => {
                self.sparse.inner.release_address_space(size);
                return Err(error);
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
    /// the memory stays held). Its buffer and address space are given back once the binds
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
        let Ok(state) = self.range(id) else {
            return false;
        };
        let page = self.page_size();
        let mut at = offset;
        let end = offset + len;
        while at < end {
            match state.mapped.range(..=at).next_back() {
                Some((&start, run)) if start + run.pages as u64 * page > at => {
                    at = start + run.pages as u64 * page;
                }
                _ => return false,
            }
        }
        true
    }

    /// Binds memory behind every `(offset, len)` run of range `id`, in at most one
    /// `vkQueueBindSparse`. Runs are whole pages, inside the range, and not mapped yet.
    ///
    /// Parts of the runs that spare pages of the range already back are mapped with no bind.
    /// The rest takes free pages of the chunks; where they are too few, the spare pages of
    /// every range are unbound in the same call, and only then is a chunk allocated. Free
    /// pages left over (up to a preferred chunk) are bound as spare right after the map's
    /// end, as far as the range has unmapped room there.
    pub fn map(&mut self, id: u32, runs: &[(u64, u64)]) -> Result<(), SparseError> {
        let page = self.page_size();
        self.check_runs(id, runs)?;
        {
            let state = self.range(id)?;
            for &(offset, len) in runs {
                let overlaps = state
                    .mapped
                    .range(..offset + len)
                    .next_back()
                    .is_some_and(|(&start, run)| start + run.pages as u64 * page > offset);
                if overlaps {
                    return Err(SparseError::Invalid(format!(
                        "range {id}: {offset}..{} is already partly mapped",
                        offset + len
                    )));
                }
            }
        }
        let total_pages: u64 = runs.iter().map(|&(_, len)| len / page).sum();
        if total_pages == 0 {
            return Ok(());
        }
        // What spare pages of this range already back, and what is left to bind.
        let (mut covered, mut uncovered) = (Vec::new(), Vec::new());
        {
            let state = self.ranges[id as usize].as_mut().expect("checked live");
            for &(offset, len) in runs.iter().filter(|&&(_, len)| len > 0) {
                let (c, u) = take_covered(&mut state.spare, page, offset, len);
                covered.extend(c);
                uncovered.extend(u);
            }
        }
        let from_spare: u64 = covered.iter().map(|(_, r)| r.pages as u64).sum();
        self.spare_bytes -= from_spare * page;
        let need: u64 = uncovered.iter().map(|&(_, len)| len / page).sum();
        // Too few free pages: the spare pages elsewhere go back first (unbound in this call).
        let mut reclaimed: Vec<(u32, u64, PhysicalRun)> = Vec::new();
        if need > self.chunks.free_pages() && self.spare_bytes > 0 {
            for (range_id, state) in self.ranges.iter_mut().enumerate() {
                let Some(state) = state else { continue };
                for (offset, run) in std::mem::take(&mut state.spare) {
                    reclaimed.push((range_id as u32, offset, run));
                }
            }
            for &(_, _, run) in &reclaimed {
                self.spare_bytes -= run.pages as u64 * page;
                self.chunks.give(run);
            }
        }
        let undo = |memory: &mut PagedMemory, taken: Vec<PhysicalRun>| {
            for run in taken {
                memory.chunks.give(run);
            }
            for &(range_id, offset, run) in &reclaimed {
                memory.chunks.take_exact(run);
                memory.spare_bytes += run.pages as u64 * page;
                let state = memory.ranges[range_id as usize].as_mut().expect("live");
                state.spare.insert(offset, run);
            }
            let state = memory.ranges[id as usize].as_mut().expect("checked live");
            for &(offset, run) in &covered {
                state.spare.insert(offset, run);
            }
            memory.spare_bytes += from_spare * page;
        };
        let physical = if need > 0 {
            match self.chunks.take(&self.sparse, need, self.limit) {
                Ok(physical) => physical,
                Err(error) => {
                    undo(self, Vec::new());
                    return Err(error);
                }
            }
        } else {
            Vec::new()
        };
        // Lay the physical runs over the uncovered runs, in order.
        let mut placed: Vec<(u64, PhysicalRun)> = Vec::new();
        let mut source = physical.iter().copied();
        let mut current = source.next();
        for &(offset, len) in &uncovered {
            let mut at = offset;
            let end = offset + len;
            while at < end {
                let run = current.as_mut().expect("as many pages as the runs hold");
                let pages = (run.pages as u64).min((end - at) / page) as u32;
                placed.push((
                    at,
                    PhysicalRun {
                        chunk: run.chunk,
                        first: run.first,
                        pages,
                    },
                ));
                at += pages as u64 * page;
                run.first += pages;
                run.pages -= pages;
                if run.pages == 0 {
                    current = source.next();
                }
            }
        }
        // Spare pages after the map's end, unless this call unbinds some of this range's
        // (a range of a resource is bound at most once per batch).
        let map_end = runs.iter().map(|&(o, l)| o + l).max().unwrap_or(0);
        let mut spare: Vec<(u64, PhysicalRun)> = Vec::new();
        if self.chunks.binds_spare() && !reclaimed.iter().any(|&(range_id, _, _)| range_id == id) {
            let state = self.ranges[id as usize].as_ref().expect("checked live");
            let next_mapped = state.mapped.range(map_end..).next().map(|(&o, _)| o);
            let next_spare = state.spare.range(map_end..).next().map(|(&o, _)| o);
            let room_end = [next_mapped, next_spare]
                .into_iter()
                .flatten()
                .fold(state.range.size(), u64::min);
            let pages = (room_end.saturating_sub(map_end) / page)
                .min(self.chunks.free_pages())
                .min(self.chunks.preferred_pages());
            if pages > 0 {
                let taken = self
                    .chunks
                    .take(&self.sparse, pages, None)
                    .expect("no more pages than are free");
                let mut at = map_end;
                for run in taken {
                    spare.push((at, run));
                    at += run.pages as u64 * page;
                }
            }
        }
        let bind_of = |memory: &PagedMemory, &(offset, run): &(u64, PhysicalRun)| {
            vk::SparseMemoryBind::default()
                .resource_offset(offset)
                .size(run.pages as u64 * page)
                .memory(memory.chunks.memory(run.chunk))
                .memory_offset(run.first as u64 * page)
        };
        let mut entries: Vec<(u32, Vec<vk::SparseMemoryBind>)> = Vec::new();
        let mut reclaim_ranges: Vec<u32> = reclaimed.iter().map(|&(r, _, _)| r).collect();
        reclaim_ranges.dedup();
        for range_id in reclaim_ranges {
            let runs = reclaimed
                .iter()
                .filter(|&&(r, _, _)| r == range_id)
                .map(|&(_, offset, run)| (offset, run.pages as u64 * page));
            entries.push((range_id, unbinds(runs)));
        }
        let binds: Vec<vk::SparseMemoryBind> = placed
            .iter()
            .chain(&spare)
            .map(|bind| bind_of(self, bind))
            .collect();
        if !binds.is_empty() {
            entries.push((id, binds));
        }
        if entries.is_empty() {
            self.counters.maps_from_spare += 1;
        } else if let Err(error) = self.submit_bind_call(&entries, BindKind::Map) {
            let taken = physical
                .into_iter()
                .chain(spare.into_iter().map(|(_, run)| run))
                .collect();
            undo(self, taken);
            return Err(error);
        }
        let spare_bytes: u64 = spare.iter().map(|(_, r)| r.pages as u64 * page).sum();
        let state = self.ranges[id as usize].as_mut().expect("checked live");
        for (offset, run) in covered.into_iter().chain(placed) {
            state.mapped.insert(offset, run);
        }
        for (offset, run) in spare {
            state.spare.insert(offset, run);
        }
        self.spare_bytes += spare_bytes;
        self.counters.spare_bound_bytes_total += spare_bytes;
        let bytes = total_pages * page;
        self.mapped_bytes += bytes;
        self.counters.mapped_bytes_total += bytes;
        Ok(())
    }

    /// Unbinds every `(offset, len)` run of range `id` (each wholly mapped) in one
    /// `vkQueueBindSparse`, after all work submitted so far has finished on the GPU. The
    /// memory stays held for later maps.
    pub fn unmap(&mut self, id: u32, runs: &[(u64, u64)]) -> Result<(), SparseError> {
        let page = self.page_size();
        self.check_runs(id, runs)?;
        for &(offset, len) in runs {
            if !self.is_mapped(id, offset, len) {
                return Err(SparseError::Invalid(format!(
                    "range {id}: {offset}..{} is not wholly mapped",
                    offset + len
                )));
            }
        }
        if runs.iter().all(|&(_, len)| len == 0) {
            return Ok(());
        }
        let raw_runs: Vec<(u64, u64)> = runs.to_vec();
        let binds = unbinds(raw_runs.iter().copied().filter(|&(_, len)| len > 0));
        self.submit_bind_call(&[(id, binds)], BindKind::Unmap)?;
        let state = self.ranges[id as usize].as_mut().expect("checked live");
        let mut freed = Vec::new();
        for &(offset, len) in &raw_runs {
            let end = offset + len;
            let mut at = offset;
            while at < end {
                let (&start, &run) = state
                    .mapped
                    .range(..=at)
                    .next_back()
                    .expect("checked mapped");
                state.mapped.remove(&start);
                let run_end = start + run.pages as u64 * page;
                let cut_start = ((at - start) / page) as u32;
                let cut_end = ((run_end.min(end) - start) / page) as u32;
                if cut_start > 0 {
                    state.mapped.insert(
                        start,
                        PhysicalRun {
                            pages: cut_start,
                            ..run
                        },
                    );
                }
                if cut_end < run.pages {
                    state.mapped.insert(
                        start + cut_end as u64 * page,
                        PhysicalRun {
                            chunk: run.chunk,
                            first: run.first + cut_end,
                            pages: run.pages - cut_end,
                        },
                    );
                }
                freed.push(PhysicalRun {
                    chunk: run.chunk,
                    first: run.first + cut_start,
                    pages: cut_end - cut_start,
                });
                at = start + cut_end as u64 * page;
            }
        }
        for run in freed {
            self.chunks.give(run);
        }
        let bytes: u64 = raw_runs.iter().map(|&(_, len)| len).sum();
        self.mapped_bytes -= bytes;
        self.counters.unmapped_bytes_total += bytes;
        Ok(())
    }

    /// Frees chunks with no page in use, largest first, as long as the total stays at most
    /// `bytes`; returns the bytes freed. Held pages of chunks that are partly in use stay.
    pub fn release_idle(&mut self, bytes: u64) -> u64 {
        if bytes > 0 && self.spare_keeps_a_chunk() {
            // Spare pages alone keep a chunk in use; a failure leaves them where they are.
            let _ = self.reclaim_spare(None);
        }
        if bytes > 0 && self.chunks.has_idle() {
            // Unbinds of the chunks' pages may still be pending on the GPU.
            let start = Instant::now();
            let _ = self.sparse.wait_for_binds();
            self.counters.unmap_wait_time += start.elapsed();
            // Every bind is applied now: released ranges' buffers can go too.
            let start = Instant::now();
            self.sparse.retire_applied();
            self.counters.range_time += start.elapsed();
        }
        self.chunks.release_idle(&self.sparse, bytes)
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

    /// Bytes of held memory not mapped for any block: pages bound nowhere and spare pages.
    pub fn idle_bytes(&self) -> u64 {
        self.chunks.free_bytes() + self.spare_bytes
    }

    /// Whether some chunk has no page taken but spare ones, so that unbinding the spare
    /// pages would let it be freed.
    fn spare_keeps_a_chunk(&self) -> bool {
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

    fn check_runs(&self, id: u32, runs: &[(u64, u64)]) -> Result<(), SparseError> {
        let page = self.page_size();
        let size = self.range(id)?.range.size();
        for &(offset, len) in runs {
            if offset % page != 0
                || len % page != 0
                || offset.checked_add(len).is_none_or(|end| end > size)
            {
                return Err(SparseError::Invalid(format!(
                    "range {id} of {size} bytes: run {offset}+{len} is not whole {page} B pages \
                     inside it"
                )));
            }
        }
        Ok(())
    }

    /// One `vkQueueBindSparse` of `entries` (binds into each named range), ordered with the
    /// GPU: a map before any later wgpu work, an unmap after all earlier wgpu work, a
    /// reclaim of spare pages (which no work used) with neither. With timelines the GPU does
    /// the waiting; without, the CPU does (a fence, and for an unmap a wait for the GPU
    /// first).
    fn submit_bind_call(
        &mut self,
        entries: &[(u32, Vec<vk::SparseMemoryBind>)],
        kind: BindKind,
    ) -> Result<(), SparseError> {
        let mut infos = Vec::with_capacity(entries.len());
        for (id, binds) in entries {
            let buffer = self.range(*id)?.range.raw();
            infos.push(
                vk::SparseBufferMemoryBindInfo::default()
                    .buffer(buffer)
                    .binds(binds),
            );
        }
        let sparse = self.sparse.clone();
        let timelines = sparse.inner.timelines.as_ref();
        let after_gpu = match (kind, timelines) {
            (BindKind::Unmap, Some(timelines)) => {
                // Read before any signal: work counted up to here was submitted before it.
                let clock = self
                    .work_clock
                    .as_ref()
                    .map(|points| points.load(Ordering::SeqCst));
                match (clock, self.last_unbind_signal) {
                    // No work was submitted since the last signal: it covers this unbind.
                    (Some(now), Some((at, value))) if now == at => Some(value),
                    _ => {
                        // The empty submission that marks the work the unbind waits for is
                        // part of the cost of unbinding.
                        let start = Instant::now();
                        let value = timelines.gpu_done(&self.queue);
                        self.counters.bind_time += start.elapsed();
                        self.counters.unbind_signals += 1;
                        self.last_unbind_signal = clock.map(|at| (at, value));
                        Some(value)
                    }
                }
            }
            (BindKind::Unmap, None) => {
                self.wait_for_gpu();
                None
            }
            (BindKind::Map | BindKind::Reclaim, _) => None,
        };
        let start = Instant::now();
        let result = match timelines {
            Some(timelines) => sparse.bind_ordered(&infos, after_gpu).map(|value| {
                if kind == BindKind::Map {
                    timelines.gpu_waits_for_bind(&self.queue, value);
                }
            }),
            None => sparse.bind(&infos),
        };
        self.counters.bind_time += start.elapsed();
        self.counters.bind_calls += 1;
        result
    }

    /// Waits until everything submitted to the device so far (and writes queued before
    /// now) has finished.
    fn wait_for_gpu(&mut self) {
        let start = Instant::now();
        let index = self.queue.submit(std::iter::empty());
        // A device lost or timed out leaves nothing running to wait for.
        let _ = self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        });
        self.counters.unmap_wait_time += start.elapsed();
    }
}

impl Drop for PagedMemory {
    fn drop(&mut self) {
        // Every block is gone; wait for the work that used them and for pending binds, then
        // give everything back.
        self.wait_for_gpu();
        let _ = self.sparse.wait_for_binds();
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
