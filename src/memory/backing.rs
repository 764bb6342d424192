//! What backs a device pool: fixed segment buffers, or pages-mode address ranges, as the
//! pool's [`MemoryPlan`] decided.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::cuda_segment_addresses::CudaSegmentAddresses;
use super::device_memory::DeviceMemoryUsage;
use super::paged::PagedSource;
use super::plan::MemoryPlan;
use super::segments::SegmentBuffers;
use super::wrappers::WorkClock;
use crate::engine::{
    Allocation, MemoryMode, PageMapping, SegmentId, SegmentKind, SegmentSource, SourceError,
};
use crate::gpu::sparse::{ChunkPolicy, PagedMemory};
use crate::history::{Action, EventLog, Observed};

/// Fixed segment buffers of `usage`.
fn segment_buffers(device: &wgpu::Device, usage: wgpu::BufferUsages, label: &str) -> Backing {
    Backing::new(BackingKind::Segments(SegmentBuffers::new(
        device.clone(),
        usage,
        label.into(),
    )))
}

/// The backing `plan` decided, of `usage` on `device`: address ranges whose chunks
/// follow `policy` in pages mode (with the plan's reserve of chunks allocated ahead), fixed
/// segment buffers otherwise. Nothing is decided here.
pub(crate) fn for_plan(
    plan: &MemoryPlan,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    usage: wgpu::BufferUsages,
    label: &str,
    policy: ChunkPolicy,
) -> Backing {
    match (plan.mode, &plan.sparse) {
        (MemoryMode::Pages, Some(sparse)) => {
            let mut memory = PagedMemory::on(sparse.clone(), device, queue, usage, label, policy);
            memory.set_reserve(plan.reserve_chunks);
            memory.set_bind_batch(plan.bind_batch);
            Backing::new(BackingKind::Pages(Box::new(PagedSource::new(memory))))
        }
        _ => segment_buffers(device, usage, label),
    }
}

/// The memory behind a device pool's engine, and the pool's event log while it records.
pub(crate) struct Backing {
    source: BackingKind,
    /// Counts the calls that changed the device memory taken (a segment created or released,
    /// a chunk allocated or freed), shared with the pool so that a watcher can tell without
    /// taking the pool's lock.
    pub changes: Arc<AtomicU64>,
    /// The event log, while the pool records its history (`Pool::record_history`): segments
    /// created and released, ranges placed, pages mapped and unmapped.
    pub history: Option<EventLog>,
    /// Fixed segments under `policy:pytorch`: where `cudaMalloc` would put each segment,
    /// given to the engine as its address (see [`Backing::use_cuda_addresses`]).
    addresses: Option<CudaSegmentAddresses>,
}

/// The engine's segment source, of either kind: fixed segment buffers, or address ranges
/// in pages mode.
enum BackingKind {
    Segments(SegmentBuffers),
    Pages(Box<PagedSource>),
}

impl Backing {
    fn new(source: BackingKind) -> Backing {
        Backing {
            source,
            changes: Arc::default(),
            history: None,
            addresses: None,
        }
    }

    /// Gives the engine each new fixed segment's address as the CUDA driver would place it
    /// (the model `wgpool replay` uses under `policy:pytorch`), so that free blocks of equal
    /// size are reused in PyTorch's order. Fixed segments only: in pages mode this does
    /// nothing.
    pub fn use_cuda_addresses(&mut self) {
        if let BackingKind::Segments(_) = self.source {
            self.addresses = Some(CudaSegmentAddresses::new());
        }
    }

    /// The buffer a new device block is reached through, the index of that wrapper, and the
    /// stamp of unsettled work it takes over (0 for none): the segment's buffer, or in pages
    /// mode one of its range's wrappers, chosen by the rule in [`wrappers`](super::wrappers)
    /// (which may order GPU work first).
    #[inline]
    pub fn block_buffer(&mut self, allocation: &Allocation) -> (&wgpu::Buffer, u32, u64) {
        match &mut self.source {
            BackingKind::Segments(segments) => (segments.buffer(allocation.segment), 0, 0),
            BackingKind::Pages(pages) => pages.block_buffer(allocation),
        }
    }

    /// Notes a device block freed to the engine (before the engine frees it): the block of
    /// `capacity` bytes at `offset` of `segment`, reached through `wrapper`, with the GPU work
    /// bits that reached it and the unsettled work it took over (`work`).
    #[inline]
    pub fn block_freed(
        &mut self,
        segment: SegmentId,
        offset: u64,
        capacity: u64,
        wrapper: u32,
        work: (u8, u64),
    ) {
        if let BackingKind::Pages(pages) = &mut self.source {
            pages.block_freed(segment.0, offset, capacity, wrapper, work);
        }
    }

    /// Sets the device's work clock, which tells what freed bytes need ordering and when an
    /// unbind needs a signal of its own (pages mode; segments need none).
    pub fn set_work_clock(&mut self, clock: WorkClock) {
        if let BackingKind::Pages(pages) = &mut self.source {
            pages.set_work_clock(clock);
        }
    }

    /// Submits the binds queued on the device (pages mode; see `page_bind_batch`), counted
    /// as the pool's bind call.
    pub fn submit_queued_binds(&mut self) -> Result<(), SourceError> {
        match &mut self.source {
            BackingKind::Pages(pages) => Ok(pages.memory_mut().submit_queued_binds()?),
            BackingKind::Segments(_) => Ok(()),
        }
    }

    /// Blocks until every bind submitted on the device has been applied (pages mode; at
    /// once for segments).
    pub fn wait_for_binds(&self) -> Result<(), SourceError> {
        match &self.source {
            BackingKind::Pages(pages) => Ok(pages.memory().wait_for_binds()?),
            BackingKind::Segments(_) => Ok(()),
        }
    }

    /// The pool's mode.
    pub fn mode(&self) -> MemoryMode {
        match &self.source {
            BackingKind::Segments(_) => MemoryMode::Segments,
            BackingKind::Pages(_) => MemoryMode::Pages,
        }
    }

    /// Device memory taken and its cost.
    pub fn usage_report(&self) -> DeviceMemoryUsage {
        match &self.source {
            BackingKind::Segments(segments) => {
                let counters = segments.counters();
                DeviceMemoryUsage {
                    mode: MemoryMode::Segments,
                    device_bytes: counters.live_bytes,
                    device_bytes_peak: counters.peak_bytes,
                    driver_time: counters.driver_time,
                    allocation_time: counters.driver_time,
                    background_allocation_time: Duration::ZERO,
                    background_allocations: 0,
                    reserve_taken: 0,
                    reserve_waits: 0,
                    bind_time: Duration::ZERO,
                    unmap_wait_time: Duration::ZERO,
                    allocations: counters.created,
                    frees: counters.destroyed,
                    bind_calls: 0,
                    maps_queued: 0,
                    unmaps_queued: 0,
                    wrapper_orderings: 0,
                    unbind_signals: 0,
                    ordering_time: Duration::ZERO,
                    ranges_created: 0,
                    ranges_released: 0,
                    wrappers_created: 0,
                    range_time: Duration::ZERO,
                }
            }
            BackingKind::Pages(source) => {
                let pages = source.memory();
                let counters = pages.counters();
                DeviceMemoryUsage {
                    mode: MemoryMode::Pages,
                    device_bytes: pages.usage().device_bytes,
                    device_bytes_peak: pages.device_bytes_peak(),
                    driver_time: counters.driver_time(),
                    allocation_time: counters.chunks.time,
                    background_allocation_time: counters.chunks.background_time,
                    background_allocations: counters.chunks.background_allocations,
                    reserve_taken: counters.chunks.reserve_taken,
                    reserve_waits: counters.chunks.reserve_waits,
                    bind_time: counters.bind_time,
                    unmap_wait_time: counters.unmap_wait_time,
                    allocations: counters.chunks.allocations,
                    frees: counters.chunks.frees,
                    bind_calls: counters.bind_calls,
                    maps_queued: counters.maps_queued,
                    unmaps_queued: counters.unmaps_queued,
                    wrapper_orderings: source.wrapper_orderings(),
                    unbind_signals: counters.unbind_signals,
                    ordering_time: counters.ordering_time,
                    ranges_created: counters.ranges_created,
                    ranges_released: counters.ranges_released,
                    wrappers_created: counters.wrappers_created,
                    range_time: counters.range_time,
                }
            }
        }
    }

    /// Caps device memory (page chunks; segments are capped by the engine alone).
    pub fn set_limit(&mut self, limit: Option<u64>) {
        if let BackingKind::Pages(pages) = &mut self.source {
            pages.memory_mut().set_limit(limit);
        }
    }

    /// Runs `call` on the source, wrapped so that the history (while the pool records it)
    /// hears of what the call did, and counts a change when the device memory taken moved.
    fn with_source<R>(&mut self, call: impl FnOnce(&mut dyn SegmentSource) -> R) -> R {
        let before = self.device_bytes();
        let source: &mut dyn SegmentSource = match &mut self.source {
            BackingKind::Segments(segments) => segments,
            BackingKind::Pages(pages) => &mut **pages,
        };
        let result = call(&mut Observed {
            source,
            observer: &mut self.history,
        });
        if self.device_bytes() != before {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Bytes of device memory taken now.
    fn device_bytes(&self) -> u64 {
        match &self.source {
            BackingKind::Segments(segments) => segments.counters().live_bytes,
            BackingKind::Pages(pages) => pages.memory().usage().device_bytes,
        }
    }

    /// The segment buffers, in segments mode (`None` in pages mode).
    pub fn segments(&self) -> Option<&SegmentBuffers> {
        match &self.source {
            BackingKind::Segments(segments) => Some(segments),
            BackingKind::Pages(_) => None,
        }
    }

    /// The buffer of live range `id`, in pages mode (`None` for segments and for a range
    /// that is not live).
    pub fn range_buffer(&self, id: u32) -> Option<&wgpu::Buffer> {
        match &self.source {
            BackingKind::Segments(_) => None,
            BackingKind::Pages(pages) => pages.memory().buffer(id),
        }
    }

    /// Whether every page of `offset..offset + len` of range `id` is mapped (pages mode;
    /// `false` for segments).
    pub fn is_mapped(&self, id: u32, offset: u64, len: u64) -> bool {
        match &self.source {
            BackingKind::Segments(_) => false,
            BackingKind::Pages(pages) => pages.memory().is_mapped(id, offset, len),
        }
    }

    /// Labels the history's page events of `action` with `label` until
    /// [`unlabel_pages`](Backing::unlabel_pages) (nothing while no history is recorded).
    pub fn label_pages(&mut self, action: Action, label: &str) {
        if let Some(log) = &mut self.history {
            log.set_page_label(Some((action, label.into())));
        }
    }

    /// Ends [`label_pages`](Backing::label_pages).
    pub fn unlabel_pages(&mut self) {
        if let Some(log) = &mut self.history {
            log.set_page_label(None);
        }
    }
}

impl SegmentSource for Backing {
    fn create_segment(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError> {
        self.with_source(|source| source.create_segment(id, size, kind))
    }

    fn release_segment(&mut self, id: SegmentId, size: u64) {
        self.with_source(|source| source.release_segment(id, size));
        if let Some(addresses) = &mut self.addresses {
            addresses.released(id);
        }
    }

    fn segment_address(&mut self, id: SegmentId, size: u64, _kind: SegmentKind) -> Option<u64> {
        self.addresses.as_mut()?.created(id, size)
    }

    fn page_mapping(&self) -> Option<PageMapping> {
        match &self.source {
            BackingKind::Segments(segments) => segments.page_mapping(),
            BackingKind::Pages(pages) => pages.page_mapping(),
        }
    }

    fn reserve_range(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError> {
        self.with_source(|source| source.reserve_range(id, size, kind))
    }

    fn release_range(&mut self, id: SegmentId, size: u64) {
        self.with_source(|source| source.release_range(id, size));
    }

    fn map_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.with_source(|source| source.map_pages(id, runs))
    }

    fn unmap_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.with_source(|source| source.unmap_pages(id, runs))
    }

    fn release_spare(&mut self, bytes: u64) {
        self.with_source(|source| source.release_spare(bytes));
    }
}
