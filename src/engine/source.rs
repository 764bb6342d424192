//! Where segment memory comes from: the trait the engine calls, what a source offers for
//! page mapping, and the source's typed error. A simulated source is in
//! [`simulated`](super::simulated).

use std::error::Error;
use std::ops::Range;
use std::sync::Arc;

use super::rounding::SegmentKind;
use super::types::SegmentId;

/// The device (or a simulation of it) behind the engine's segments.
///
/// The engine calls `create_segment` when it needs a new segment and `release_segment` when
/// it gives one back; it never touches memory itself. A source that cannot provide the
/// memory returns a [`SourceError`]: an [out-of-memory](SourceError::out_of_memory) error
/// sends the engine down its retry chain (release cached segments, try again, and finally
/// [`AllocError::OutOfMemory`](super::AllocError::OutOfMemory)); [any other
/// error](SourceError::other) comes back to the caller at once as
/// [`AllocError::Source`](super::AllocError::Source), with the cache untouched.
///
/// # Page mapping
///
/// A source that can map pages (virtual memory: CUDA's `cuMemMap`, Vulkan's sparse binding)
/// says so in [`page_mapping`](SegmentSource::page_mapping) and implements the page
/// operations. The engine then works in *pages* mode: it reserves address ranges with no
/// memory behind them and maps and unmaps whole pages inside them, where blocks live; it
/// stays in charge of every placement, and the source only carries out what it is told:
///
/// - [`reserve_range`](SegmentSource::reserve_range) /
///   [`release_range`](SegmentSource::release_range): address space only, no memory. Ranges
///   and segments share the id space: an id is either a live segment or a live range.
/// - [`map_pages`](SegmentSource::map_pages): puts memory behind runs of a range, in *one*
///   batched bind; spare memory (from earlier unmaps) is used first, then new memory.
/// - [`unmap_pages`](SegmentSource::unmap_pages): takes memory from behind runs, in one
///   batched bind; the memory stays with the source as *spare* memory, for the next
///   `map_pages`.
/// - [`release_spare`](SegmentSource::release_spare): frees spare memory (`empty_cache`, a cap).
///
/// Every run is a byte range `start..end` inside the range, both ends multiples of
/// [`PageMapping::page`]; the runs of one call are sorted and do not overlap. The engine
/// maps only unmapped pages and unmaps only mapped pages holding no live block; a source
/// whose pages are in use by GPU work must defer the unbind until that work completes (the
/// engine has already handed the addresses out again only where they are mapped). Physical
/// memory, as the engine counts it for caps and statistics, is the bytes mapped plus the
/// spare bytes.
pub trait SegmentSource {
    /// Provides memory for segment `id` of `size` bytes. `id` is not in use until the matching
    /// `release_segment`; ids are reused after release.
    ///
    /// # Errors
    ///
    /// [`SourceError::out_of_memory`] when the device has no memory for it now, and
    /// [`SourceError::other`] for any other failure.
    fn create_segment(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError>;

    /// Gives back the memory of segment `id`, which has `size` bytes and no live blocks.
    fn release_segment(&mut self, id: SegmentId, size: u64);

    /// The address of segment `id`, just created with `size` bytes, where the device decides
    /// it (as `cudaMalloc` does), or `None` (the default) to let the engine number its
    /// segments itself.
    ///
    /// The engine orders free blocks of equal size by address, so addresses decide which of
    /// two equal blocks is reused. A source that answers must give live segments disjoint
    /// ranges; an address that is not 512 B aligned or that reaches 2^57 is ignored. Trace
    /// replay's oracle mode answers with the addresses PyTorch handed out; an address range
    /// of pages mode, whose first block sits at its start as in PyTorch's expandable segments, can
    /// take its address the same way.
    fn segment_address(&mut self, id: SegmentId, size: u64, kind: SegmentKind) -> Option<u64> {
        let _ = (id, size, kind);
        None
    }

    /// Whether the source can map pages, and its page and largest range. `None` (the
    /// default) means it cannot: the engine uses fixed segments.
    fn page_mapping(&self) -> Option<PageMapping> {
        None
    }

    /// Reserves address range `id` of `size` bytes, with no memory behind it. `size` is a
    /// multiple of the page and at most [`PageMapping::max_range`]; `id` is not live.
    ///
    /// # Errors
    ///
    /// [`SourceError::out_of_memory`] when no address space is left (the engine asks again
    /// for a range of just the request's size, then releases cached memory and retries),
    /// [`SourceError::other`] otherwise. The default refuses:
    /// the source cannot map pages.
    fn reserve_range(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError> {
        let _ = (id, size, kind);
        Err(SourceError::other("this segment source cannot map pages"))
    }

    /// Gives back range `id` of `size` bytes. No page of it is mapped.
    fn release_range(&mut self, id: SegmentId, size: u64) {
        let _ = (id, size);
    }

    /// Maps memory behind `runs` of range `id` in one batched bind: spare memory first, then
    /// new memory. All or nothing: on error no page of the call is mapped.
    ///
    /// # Errors
    ///
    /// [`SourceError::out_of_memory`] when the device has too little memory (the engine
    /// recycles idle pages, releases cached memory and retries), [`SourceError::other`]
    /// for anything else. The default refuses.
    fn map_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        let _ = (id, runs);
        Err(SourceError::other("this segment source cannot map pages"))
    }

    /// Unmaps `runs` of range `id` in one batched bind. Their memory stays spare for reuse.
    /// No live block lies on these pages, but GPU work submitted earlier may still use
    /// them: the source unbinds them only once that work has completed.
    ///
    /// # Errors
    ///
    /// Any failure; the engine then keeps the pages as mapped. The default refuses.
    fn unmap_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        let _ = (id, runs);
        Err(SourceError::other("this segment source cannot map pages"))
    }

    /// Frees `bytes` of spare memory (memory unmapped and kept for reuse). The engine asks
    /// for no more than it unmapped and has not mapped again.
    fn release_spare(&mut self, bytes: u64) {
        let _ = bytes;
    }
}

/// What a source offers for page mapping.
///
/// ```
/// use wgpool::engine::PageMapping;
/// // An NVIDIA H200 through Vulkan sparse binding: 64 KiB pages, 1 TiB of address space.
/// let h200 = PageMapping::new(64 << 10, 1 << 40);
/// assert_eq!((h200.page, h200.range), (65536, 1 << 40));
/// // lavapipe: 2 GiB of address space shared by every pool, so ranges of 64 MiB unless a
/// // block needs more.
/// let lavapipe = PageMapping::new(4096, (2 << 30) - 4096).with_range(64 << 20);
/// assert_eq!(lavapipe.range, 64 << 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PageMapping {
    /// The device's page: the granularity of every map and unmap. A power of two.
    pub page: u64,
    /// The largest address range one reservation may have: the largest block the engine
    /// serves in pages mode.
    pub max_range: u64,
    /// The largest range the engine reserves for blocks that fit in it (at most
    /// `max_range`). Where address space is scarce and shared by many pools, the source
    /// keeps it below `max_range`; a larger block still gets a range of its own size.
    pub range: u64,
}

impl PageMapping {
    /// A device with pages of `page` bytes (a power of two) and ranges of up to `max_range`
    /// bytes, all of which the engine may use for one range.
    pub fn new(page: u64, max_range: u64) -> PageMapping {
        PageMapping {
            page,
            max_range,
            range: max_range,
        }
    }

    /// Ranges of at most `range` bytes for blocks that fit in one (clamped to
    /// `page..=max_range`).
    pub fn with_range(mut self, range: u64) -> PageMapping {
        self.range = range.clamp(self.page.min(self.max_range), self.max_range);
        self
    }
}

/// What kind of failure a [`SourceError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceErrorKind {
    /// The device has no memory for the request now; releasing cached memory may help.
    OutOfMemory,
    /// The device has memory, but no address space for another address range: ranges of
    /// other pools on the device hold it. Releasing this engine's idle ranges may help; a
    /// larger cap or host overflow does not.
    AddressSpace,
    /// The device was lost: no memory it had or could have is usable any more. Retrying,
    /// releasing memory or another pool on the same device will not help.
    DeviceLost,
    /// Anything else (a validation error): retrying will not help.
    Other,
}

/// Why a [`SegmentSource`] could not provide memory: its kind, and the underlying error as
/// [`source()`](Error::source).
///
/// Two errors are equal when their kinds and their messages are.
#[derive(Debug, Clone)]
pub struct SourceError {
    kind: SourceErrorKind,
    inner: Arc<dyn Error + Send + Sync + 'static>,
}

impl SourceError {
    /// The device is out of memory; `error` says what the device reported.
    pub fn out_of_memory(error: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        SourceError {
            kind: SourceErrorKind::OutOfMemory,
            inner: Arc::from(error.into()),
        }
    }

    /// The device has no address space left for another range; `error` says what the
    /// device reported. Counts as out-of-memory for the retry chain.
    pub fn address_space(error: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        SourceError {
            kind: SourceErrorKind::AddressSpace,
            inner: Arc::from(error.into()),
        }
    }

    /// The device was lost; `error` says what the device reported.
    pub fn device_lost(error: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        SourceError {
            kind: SourceErrorKind::DeviceLost,
            inner: Arc::from(error.into()),
        }
    }

    /// Any failure other than out-of-memory; `error` is the underlying error.
    pub fn other(error: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        SourceError {
            kind: SourceErrorKind::Other,
            inner: Arc::from(error.into()),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> SourceErrorKind {
        self.kind
    }

    /// Whether the device was out of memory or of address space (the only kinds the retry
    /// chain handles).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self.kind,
            SourceErrorKind::OutOfMemory | SourceErrorKind::AddressSpace
        )
    }
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            SourceErrorKind::OutOfMemory => write!(f, "out of device memory: {}", self.inner),
            SourceErrorKind::AddressSpace
            | SourceErrorKind::DeviceLost
            | SourceErrorKind::Other => {
                write!(f, "{}", self.inner)
            }
        }
    }
}

impl Error for SourceError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.inner)
    }
}

impl PartialEq for SourceError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.inner.to_string() == other.inner.to_string()
    }
}

impl Eq for SourceError {}
