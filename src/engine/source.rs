//! Where segment memory comes from: the trait the engine calls, its typed error, and a
//! virtual source.

use std::collections::BTreeMap;
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
///   batched bind; memory held from earlier unmaps is used first, then new memory.
/// - [`unmap_pages`](SegmentSource::unmap_pages): takes memory from behind runs, in one
///   batched bind; the memory stays *held* by the source, for the next `map_pages`.
/// - [`release_held`](SegmentSource::release_held): frees held memory (`empty_cache`, a cap).
///
/// Every run is a byte range `start..end` inside the range, both ends multiples of
/// [`PageMapping::page`]; the runs of one call are sorted and do not overlap. The engine
/// maps only unmapped pages and unmaps only mapped pages holding no live block; a source
/// whose pages are in use by GPU work must defer the unbind until that work completes (the
/// engine has already handed the addresses out again only where they are mapped). Physical
/// memory, as the engine counts it for caps and statistics, is the bytes mapped plus the
/// bytes held.
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
    /// replay's oracle mode answers with the addresses PyTorch handed out; a page-mapped
    /// range, whose first block sits at its start as in PyTorch's expandable segments, can
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

    /// Maps memory behind `runs` of range `id` in one batched bind: held memory first, then
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

    /// Unmaps `runs` of range `id` in one batched bind. Their memory stays held for reuse.
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

    /// Frees `bytes` of held memory (memory unmapped and kept for reuse). The engine asks
    /// for no more than it unmapped and has not mapped again.
    fn release_held(&mut self, bytes: u64) {
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
    /// The device has memory, but no address space for another page-mapped range: ranges of
    /// other pools on the device hold it. Releasing this engine's idle ranges may help; a
    /// larger cap or host overflow does not.
    AddressSpace,
    /// Anything else (a validation error, a lost device): retrying will not help.
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
            SourceErrorKind::AddressSpace | SourceErrorKind::Other => write!(f, "{}", self.inner),
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

/// Segments and page-mapped ranges that exist only as numbers: for trace replay, property
/// tests and benchmarks.
///
/// With a `device_limit`, creating a segment or mapping pages that would take physical
/// memory (segments, mapped pages and held pages) over it fails with an out-of-memory
/// error, as a device would. Page mapping is on by default and modelled on an NVIDIA H200
/// ([`VirtualSegments::H200_PAGES`]); the page operations check what the engine asks (runs
/// page aligned, inside the range, maps only of unmapped pages, unmaps only of mapped ones)
/// and refuse a wrong call with [`SourceError::other`], so that tests catch it.
#[derive(Debug, Clone)]
pub struct VirtualSegments {
    /// Bytes of live segments.
    pub live_bytes: u64,
    /// Most bytes of physical memory the simulated device holds, if limited.
    pub device_limit: Option<u64>,
    /// Segments created so far.
    pub created: u64,
    /// Segments released so far.
    pub released: u64,
    /// Page mapping, if the simulated device can.
    pub pages: Option<PageMapping>,
    /// Bytes of pages mapped now.
    pub mapped_bytes: u64,
    /// Bytes unmapped and held for reuse.
    pub held_bytes: u64,
    /// Bytes mapped over the source's life.
    pub mapped_total: u64,
    /// Bytes unmapped over the source's life.
    pub unmapped_total: u64,
    /// `map_pages` and `unmap_pages` calls: batched binds.
    pub bind_calls: u64,
    /// Peak of physical memory: segments plus mapped plus held bytes.
    pub physical_peak: u64,
    /// Live ranges: id -> (size, mapped runs start -> end).
    ranges: BTreeMap<u32, (u64, BTreeMap<u64, u64>)>,
}

impl Default for VirtualSegments {
    fn default() -> Self {
        VirtualSegments {
            live_bytes: 0,
            device_limit: None,
            created: 0,
            released: 0,
            pages: Some(Self::H200_PAGES),
            mapped_bytes: 0,
            held_bytes: 0,
            mapped_total: 0,
            unmapped_total: 0,
            bind_calls: 0,
            physical_peak: 0,
            ranges: BTreeMap::new(),
        }
    }
}

impl VirtualSegments {
    /// Page mapping as an NVIDIA H200 offers it through Vulkan sparse binding: 64 KiB
    /// pages and 1 TiB of address space.
    pub const H200_PAGES: PageMapping = PageMapping {
        page: 64 << 10,
        max_range: 1 << 40,
        range: 1 << 40,
    };

    /// A source with no limit, that can map pages.
    pub fn unlimited() -> Self {
        VirtualSegments::default()
    }

    /// A source that refuses to go over `limit` bytes of physical memory.
    pub fn with_device_limit(limit: u64) -> Self {
        VirtualSegments {
            device_limit: Some(limit),
            ..Default::default()
        }
    }

    /// This source with page mapping as given (`None`: a device that cannot map pages).
    pub fn with_pages(mut self, pages: Option<PageMapping>) -> Self {
        self.pages = pages;
        self
    }

    /// Physical memory held now: segments, mapped pages and held pages.
    pub fn physical_bytes(&self) -> u64 {
        self.live_bytes + self.mapped_bytes + self.held_bytes
    }

    /// Live ranges.
    pub fn live_ranges(&self) -> usize {
        self.ranges.len()
    }

    /// Whether every byte of `start..end` of range `id` is mapped.
    pub fn is_mapped(&self, id: SegmentId, start: u64, end: u64) -> bool {
        let Some((_, mapped)) = self.ranges.get(&id.0) else {
            return false;
        };
        let mut at = start;
        while at < end {
            match mapped.range(..=at).next_back() {
                Some((_, &run_end)) if run_end > at => at = run_end,
                _ => return false,
            }
        }
        true
    }

    /// Bytes of `start..end` of range `id` that are mapped.
    pub fn mapped_within(&self, id: SegmentId, start: u64, end: u64) -> u64 {
        let Some((_, mapped)) = self.ranges.get(&id.0) else {
            return 0;
        };
        let first = mapped
            .range(..=start)
            .next_back()
            .map_or(start, |(&s, _)| s);
        mapped
            .range(first..end)
            .map(|(&s, &e)| e.min(end).saturating_sub(s.max(start)))
            .sum()
    }

    fn would_exceed(&self, more: u64) -> bool {
        self.device_limit
            .is_some_and(|limit| self.physical_bytes().saturating_add(more) > limit)
    }

    fn note_peak(&mut self) {
        self.physical_peak = self.physical_peak.max(self.physical_bytes());
    }

    /// Checks that `runs` are sorted, page aligned, non-empty and inside range `id`.
    fn check_runs(&self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        let page = self.pages.map_or(1, |p| p.page);
        let Some((size, _)) = self.ranges.get(&id.0) else {
            return Err(SourceError::other(format!("range {} is not live", id.0)));
        };
        let mut previous_end = 0;
        for run in runs {
            if run.start >= run.end
                || run.start % page != 0
                || run.end % page != 0
                || run.end > *size
                || run.start < previous_end
            {
                return Err(SourceError::other(format!(
                    "range {}: run {run:?} is empty, unaligned to {page} B, outside {size} B or \
                     out of order",
                    id.0
                )));
            }
            previous_end = run.end;
        }
        Ok(())
    }
}

impl SegmentSource for VirtualSegments {
    fn create_segment(
        &mut self,
        _id: SegmentId,
        size: u64,
        _kind: SegmentKind,
    ) -> Result<(), SourceError> {
        if self.would_exceed(size) {
            return Err(SourceError::out_of_memory(format!(
                "the simulated device has {} bytes in use of its limit",
                self.physical_bytes()
            )));
        }
        self.live_bytes += size;
        self.created += 1;
        self.note_peak();
        Ok(())
    }

    fn release_segment(&mut self, _id: SegmentId, size: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.released += 1;
    }

    fn page_mapping(&self) -> Option<PageMapping> {
        self.pages
    }

    fn reserve_range(
        &mut self,
        id: SegmentId,
        size: u64,
        _kind: SegmentKind,
    ) -> Result<(), SourceError> {
        let Some(pages) = self.pages else {
            return Err(SourceError::other("this simulated device cannot map pages"));
        };
        if size == 0 || size % pages.page != 0 || size > pages.max_range {
            return Err(SourceError::other(format!(
                "range of {size} B is not a multiple of {} B up to {} B",
                pages.page, pages.max_range
            )));
        }
        if self.ranges.insert(id.0, (size, BTreeMap::new())).is_some() {
            return Err(SourceError::other(format!(
                "range {} is already live",
                id.0
            )));
        }
        Ok(())
    }

    fn release_range(&mut self, id: SegmentId, _size: u64) {
        if let Some((_, mapped)) = self.ranges.remove(&id.0) {
            // The engine unmaps every page first; keep the counts right even if it did not.
            let still: u64 = mapped.iter().map(|(s, e)| e - s).sum();
            self.mapped_bytes -= still;
            self.held_bytes += still;
        }
    }

    fn map_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.check_runs(id, runs)?;
        let (_, mapped) = self.ranges.get(&id.0).expect("checked live");
        for run in runs {
            let overlaps = mapped
                .range(..run.end)
                .next_back()
                .is_some_and(|(_, &end)| end > run.start);
            if overlaps {
                return Err(SourceError::other(format!(
                    "range {}: {run:?} is already partly mapped",
                    id.0
                )));
            }
        }
        let bytes: u64 = runs.iter().map(|r| r.end - r.start).sum();
        let from_held = bytes.min(self.held_bytes);
        if self.would_exceed(bytes - from_held) {
            return Err(SourceError::out_of_memory(format!(
                "the simulated device has {} bytes in use of its limit",
                self.physical_bytes()
            )));
        }
        let (_, mapped) = self.ranges.get_mut(&id.0).expect("checked live");
        for run in runs {
            // Join with touching runs, so that the map stays one entry per mapped stretch.
            let mut start = run.start;
            let mut end = run.end;
            if let Some((&s, &e)) = mapped.range(..start).next_back()
                && e == start
            {
                mapped.remove(&s);
                start = s;
            }
            if let Some(e) = mapped.remove(&end) {
                end = e;
            }
            mapped.insert(start, end);
        }
        self.held_bytes -= from_held;
        self.mapped_bytes += bytes;
        self.mapped_total += bytes;
        self.bind_calls += 1;
        self.note_peak();
        Ok(())
    }

    fn unmap_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        self.check_runs(id, runs)?;
        let (_, mapped) = self.ranges.get_mut(&id.0).expect("checked live");
        for run in runs {
            let covered = mapped
                .range(..=run.start)
                .next_back()
                .is_some_and(|(_, &end)| end >= run.end);
            if !covered {
                return Err(SourceError::other(format!(
                    "range {}: {run:?} is not wholly mapped",
                    id.0
                )));
            }
        }
        for run in runs {
            let (&s, &e) = mapped.range(..=run.start).next_back().expect("checked");
            mapped.remove(&s);
            if s < run.start {
                mapped.insert(s, run.start);
            }
            if run.end < e {
                mapped.insert(run.end, e);
            }
        }
        let bytes: u64 = runs.iter().map(|r| r.end - r.start).sum();
        self.mapped_bytes -= bytes;
        self.held_bytes += bytes;
        self.unmapped_total += bytes;
        self.bind_calls += 1;
        Ok(())
    }

    fn release_held(&mut self, bytes: u64) {
        self.held_bytes = self.held_bytes.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// The virtual device counts what it is asked, reuses held memory before new memory,
    /// and refuses wrong calls instead of miscounting.
    #[test]
    fn virtual_pages_count_binds_and_reuse_held_memory() {
        let mut device = VirtualSegments::with_device_limit(10 * MIB);
        let range = SegmentId(3);
        device
            .reserve_range(range, 64 * MIB, SegmentKind::Large)
            .unwrap();
        device
            .map_pages(range, &[0..4 * MIB, 6 * MIB..8 * MIB])
            .unwrap();
        assert_eq!((device.mapped_bytes, device.bind_calls), (6 * MIB, 1));
        assert!(device.is_mapped(range, 0, 4 * MIB) && !device.is_mapped(range, 0, 5 * MIB));
        device
            .unmap_pages(range, std::slice::from_ref(&(2 * MIB..4 * MIB)))
            .unwrap();
        assert_eq!((device.mapped_bytes, device.held_bytes), (4 * MIB, 2 * MIB));
        // 6 MiB physical; mapping 6 MiB more takes the 2 held and 4 new: 10 MiB, the limit.
        device
            .map_pages(range, std::slice::from_ref(&(10 * MIB..16 * MIB)))
            .unwrap();
        assert_eq!((device.physical_bytes(), device.held_bytes), (10 * MIB, 0));
        let error = device
            .map_pages(range, std::slice::from_ref(&(20 * MIB..22 * MIB)))
            .unwrap_err();
        assert!(error.is_out_of_memory(), "{error}");
        for wrong in [
            0..MIB,                 // already mapped
            30 * MIB..30 * MIB + 4, // not whole pages
            60 * MIB..70 * MIB,     // outside the range
        ] {
            let error = device
                .map_pages(range, std::slice::from_ref(&wrong))
                .unwrap_err();
            assert_eq!(error.kind(), SourceErrorKind::Other, "{wrong:?}: {error}");
        }
        let error = device
            .unmap_pages(range, std::slice::from_ref(&(40 * MIB..42 * MIB)))
            .unwrap_err();
        assert_eq!(error.kind(), SourceErrorKind::Other);
        assert_eq!(device.bind_calls, 3, "refused calls bind nothing");
        device
            .unmap_pages(range, &[0..2 * MIB, 6 * MIB..8 * MIB])
            .unwrap();
        device.release_held(4 * MIB);
        assert_eq!(device.physical_bytes(), 6 * MIB);
        assert_eq!(
            (
                device.mapped_total,
                device.unmapped_total,
                device.physical_peak
            ),
            (12 * MIB, 6 * MIB, 10 * MIB)
        );
        let without = VirtualSegments::unlimited().with_pages(None);
        assert_eq!(without.page_mapping(), None);
    }
}
