//! What backs a device pool: fixed segment buffers, or page-mapped address ranges.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::block::BlockParts;
use super::error::PoolError;
use super::options::PoolOptions;
use super::segment_buffers::SegmentBuffers;
use super::wrappers::{WorkClock, Wrappers};
use crate::config::{Config, ExpandableSegments};
use crate::engine::{
    Allocation, MemoryMode, PageMapping, SegmentId, SegmentKind, SegmentSource, SourceError,
};
use crate::format::bytes;
use crate::gpu::sparse::{PagedMemory, sparse_device};
use crate::history::{Action, EventLog, Observed};

/// Device memory a pool holds and what holding it cost in the driver, as the memory layer
/// (not the engine) counts it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DeviceMemoryUsage {
    /// The pool's mode.
    pub mode: MemoryMode,
    /// Bytes of device memory held now: segment buffers, or page chunks.
    pub device_bytes: u64,
    /// The peak of `device_bytes`.
    pub device_bytes_peak: u64,
    /// Time in the driver creating and destroying segment buffers, or allocating and
    /// freeing chunks, binding pages, and creating and releasing ranges and their wrappers.
    #[serde(serialize_with = "seconds")]
    pub driver_time: Duration,
    /// Of `driver_time`: getting and giving back memory (`create_buffer` and `destroy`, or
    /// `vkAllocateMemory` and `vkFreeMemory`).
    #[serde(serialize_with = "seconds")]
    pub allocation_time: Duration,
    /// Of `driver_time`: `vkQueueBindSparse` (and, where the device cannot order binds on
    /// the GPU, their fence waits; where it can, the empty submission before each unbind);
    /// zero for segments.
    #[serde(serialize_with = "seconds")]
    pub bind_time: Duration,
    /// CPU waits for the GPU before pages were unmapped, and for pending binds before chunks
    /// were freed or ranges released (not driver time; zero for segments).
    #[serde(serialize_with = "seconds")]
    pub unmap_wait_time: Duration,
    /// Device memory allocations made (segment buffers, or chunks).
    pub allocations: u64,
    /// Device memory given back (segment buffers destroyed, or chunks freed).
    pub frees: u64,
    /// `vkQueueBindSparse` calls (0 for segments).
    pub bind_calls: u64,
    /// Times a new block overlapped freed bytes reached through different wrappers, so
    /// that all later GPU work was ordered after all submitted work first (0 for segments;
    /// see [`Block::buffer`](super::Block::buffer)).
    pub wrapper_orderings: u64,
    /// CPU time those orderings took: an empty wgpu submission each, or where binds are not
    /// ordered on the GPU, a wait for it (not driver time; zero for segments).
    #[serde(serialize_with = "seconds")]
    pub ordering_time: Duration,
    /// Empty submissions that signal, for unbinds to wait for on the GPU, that all earlier
    /// work is done (part of `bind_time`): one per unbind call where work on the pool's
    /// blocks was submitted since the last, none otherwise (0 for segments).
    pub unbind_signals: u64,
    /// Address ranges created (sparse buffers; 0 for segments).
    pub ranges_created: u64,
    /// Address ranges released (0 for segments).
    pub ranges_released: u64,
    /// Extra wgpu wrappers made over ranges, so that blocks of one range get no barrier
    /// between their dispatches (0 for segments).
    pub wrappers_created: u64,
    /// Of `driver_time`: creating and releasing ranges and their wrappers (zero for
    /// segments).
    #[serde(serialize_with = "seconds")]
    pub range_time: Duration,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// What the configuration asks of page mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    /// Map pages, or fail (`expandable_segments:True`).
    Required,
    /// Map pages where the device can, else fixed segments (`expandable_segments:auto`).
    Preferred,
    /// Fixed segments (`expandable_segments:False`).
    Never,
}

fn wanted(config: &Config) -> Wanted {
    match config.expandable() {
        ExpandableSegments::True => Wanted::Required,
        ExpandableSegments::Auto => Wanted::Preferred,
        ExpandableSegments::False => Wanted::Never,
    }
}

/// Fixed segment buffers of `usage`.
pub(crate) fn segments(device: &wgpu::Device, usage: wgpu::BufferUsages, label: &str) -> Backing {
    Backing::new(Source::Segments(SegmentBuffers::new(
        device.clone(),
        usage,
        label.into(),
    )))
}

/// The backing a new pool gets, and why: pages where the configuration allows and the device
/// can map them, fixed segments otherwise. `expandable_segments:True` on a device that cannot
/// map pages is an error.
pub(crate) fn choose(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    config: &Config,
    usage: wgpu::BufferUsages,
    options: &PoolOptions,
) -> Result<(Backing, String), PoolError> {
    let label = options.label.as_str();
    let segments = || segments(device, usage, label);
    let want = wanted(config);
    if want == Wanted::Never {
        return Ok((segments(), "expandable_segments:False".to_string()));
    }
    match sparse_device(device) {
        Ok(sparse) => {
            let pages = PagedMemory::new(device, queue, usage, label, options.chunk_policy)
                .map_err(|source| PoolError::PageMapping { source })?;
            let reason = format!(
                "Vulkan sparse binding, {} pages, binds on {}",
                bytes(sparse.page_size()),
                if sparse.facts().own_queue {
                    "a queue of the pool's own"
                } else {
                    "wgpu's queue (serialized with its submissions)"
                }
            );
            Ok((Backing::new(Source::Pages(Box::new(pages))), reason))
        }
        Err(why) if want == Wanted::Preferred => Ok((
            segments(),
            format!(
                "expandable_segments:auto, and the device cannot map pages: {}",
                why.reason
            ),
        )),
        Err(why) => Err(PoolError::PageMappingUnavailable { reason: why.reason }),
    }
}

/// The memory behind a device pool's engine, and the pool's event log while it records.
pub(crate) struct Backing {
    pub source: Source,
    /// Counts the calls that changed the device memory held (a segment created or released,
    /// a chunk allocated or freed), shared with the pool so that a watcher can tell without
    /// taking the pool's lock.
    pub changes: Arc<AtomicU64>,
    /// The event log, while the pool records its history (`Pool::record_history`): segments
    /// created and released, ranges placed, pages mapped and unmapped.
    pub history: Option<EventLog>,
    /// The wrappers blocks of page-mapped ranges are reached through (unused for segments).
    wrappers: Wrappers,
}

/// Segment buffers, or page-mapped ranges.
pub(crate) enum Source {
    Segments(SegmentBuffers),
    Pages(Box<PagedMemory>),
}

impl Backing {
    fn new(source: Source) -> Backing {
        Backing {
            source,
            changes: Arc::default(),
            history: None,
            wrappers: Wrappers::default(),
        }
    }

    /// The buffer a new device block is reached through, the index of that wrapper, and the
    /// stamp of unsettled work it takes over (0 for none): the segment's buffer, or in pages
    /// mode one of its range's wrappers, chosen by the rule in [`wrappers`](super::wrappers)
    /// (which may order GPU work first).
    pub fn block_buffer(&mut self, allocation: &Allocation) -> (wgpu::Buffer, u32, u64) {
        match &mut self.source {
            Source::Segments(segments) => (segments.buffer(allocation.segment).clone(), 0, 0),
            Source::Pages(pages) => self.wrappers.assign(
                pages,
                allocation.segment.0,
                allocation.offset,
                allocation.block_size,
            ),
        }
    }

    /// Notes a device block freed to the engine (before the engine frees it), with the GPU
    /// work that reached it (`BlockParts::gpu_work`) and the unsettled work it took over.
    pub fn block_freed(&mut self, parts: &BlockParts) {
        if let Source::Pages(_) = &self.source {
            let stamp = self.wrappers.clock.stamp(
                parts.gpu_work.load(Ordering::Relaxed),
                parts.inherited_work.load(Ordering::Relaxed),
            );
            self.wrappers.freed(
                parts.segment.0,
                parts.offset,
                parts.capacity,
                parts.wrapper,
                stamp,
            );
        }
    }

    /// Sets the device's work clock, which tells what freed bytes need ordering and when an
    /// unbind needs a signal of its own.
    pub fn set_work_clock(&mut self, clock: WorkClock) {
        if let (Source::Pages(pages), Some(points)) = (&mut self.source, clock.counted_points()) {
            pages.set_work_clock(points);
        }
        self.wrappers.clock = clock;
    }

    /// The pool's mode.
    pub fn mode(&self) -> MemoryMode {
        match &self.source {
            Source::Segments(_) => MemoryMode::Segments,
            Source::Pages(_) => MemoryMode::Pages,
        }
    }

    /// Device memory held and its cost.
    pub fn usage_report(&self) -> DeviceMemoryUsage {
        match &self.source {
            Source::Segments(segments) => {
                let counters = segments.counters();
                DeviceMemoryUsage {
                    mode: MemoryMode::Segments,
                    device_bytes: counters.live_bytes,
                    device_bytes_peak: counters.peak_bytes,
                    driver_time: counters.driver_time,
                    allocation_time: counters.driver_time,
                    bind_time: Duration::ZERO,
                    unmap_wait_time: Duration::ZERO,
                    allocations: counters.created,
                    frees: counters.destroyed,
                    bind_calls: 0,
                    wrapper_orderings: 0,
                    unbind_signals: 0,
                    ordering_time: Duration::ZERO,
                    ranges_created: 0,
                    ranges_released: 0,
                    wrappers_created: 0,
                    range_time: Duration::ZERO,
                }
            }
            Source::Pages(pages) => {
                let counters = pages.counters();
                DeviceMemoryUsage {
                    mode: MemoryMode::Pages,
                    device_bytes: pages.usage().device_bytes,
                    device_bytes_peak: pages.device_bytes_peak(),
                    driver_time: counters.driver_time(),
                    allocation_time: counters.chunks.time,
                    bind_time: counters.bind_time,
                    unmap_wait_time: counters.unmap_wait_time,
                    allocations: counters.chunks.allocations,
                    frees: counters.chunks.frees,
                    bind_calls: counters.bind_calls,
                    wrapper_orderings: self.wrappers.orderings,
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
        if let Source::Pages(pages) = &mut self.source {
            pages.set_limit(limit);
        }
    }

    /// Runs `call` on the source, wrapped so that the history (while the pool records it)
    /// hears of what the call did, and counts a change when the device memory held moved.
    fn with_source<R>(&mut self, call: impl FnOnce(&mut dyn SegmentSource) -> R) -> R {
        let before = self.device_bytes();
        let source: &mut dyn SegmentSource = match &mut self.source {
            Source::Segments(segments) => segments,
            Source::Pages(pages) => &mut **pages,
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

    /// Bytes of device memory held now.
    fn device_bytes(&self) -> u64 {
        match &self.source {
            Source::Segments(segments) => segments.counters().live_bytes,
            Source::Pages(pages) => pages.usage().device_bytes,
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
    }

    fn page_mapping(&self) -> Option<PageMapping> {
        match &self.source {
            Source::Segments(segments) => segments.page_mapping(),
            Source::Pages(pages) => pages.page_mapping(),
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
        self.wrappers.released(id.0);
        self.with_source(|source| source.release_range(id, size));
    }

    fn map_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.with_source(|source| source.map_pages(id, runs))
    }

    fn unmap_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.with_source(|source| source.unmap_pages(id, runs))
    }

    fn release_held(&mut self, bytes: u64) {
        self.with_source(|source| source.release_held(bytes));
    }
}
