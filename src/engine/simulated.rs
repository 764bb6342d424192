//! [`VirtualSegments`]: a [`SegmentSource`] whose segments and address ranges exist only
//! as numbers, for trace replay, property tests and benchmarks.

use std::ops::Range;

use super::mapped_runs::MappedRuns;

use super::rounding::SegmentKind;
use super::source::{PageMapping, SegmentSource, SourceError};
use super::types::SegmentId;

/// Segments and address ranges that exist only as numbers: for trace replay, property
/// tests and benchmarks.
///
/// With a `device_limit`, creating a segment or mapping pages that would take physical
/// memory (segments, mapped pages and spare pages) over it fails with an out-of-memory
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
    /// Spare bytes: unmapped and kept for reuse.
    pub spare_bytes: u64,
    /// Bytes mapped over the source's life.
    pub mapped_total: u64,
    /// Bytes unmapped over the source's life.
    pub unmapped_total: u64,
    /// `map_pages` and `unmap_pages` calls: batched binds.
    pub bind_calls: u64,
    /// Peak of physical memory: segments plus mapped plus spare bytes.
    pub physical_peak: u64,
    /// Live ranges by id: (size, mapped stretches).
    ranges: Vec<Option<(u64, MappedRuns)>>,
    /// Live ranges.
    live_ranges: usize,
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
            spare_bytes: 0,
            mapped_total: 0,
            unmapped_total: 0,
            bind_calls: 0,
            physical_peak: 0,
            ranges: Vec::new(),
            live_ranges: 0,
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

    /// Physical memory now: segments, mapped pages and spare pages.
    pub fn physical_bytes(&self) -> u64 {
        self.live_bytes + self.mapped_bytes + self.spare_bytes
    }

    /// Live ranges.
    pub fn live_ranges(&self) -> usize {
        self.live_ranges
    }

    /// Range `id`, if live: (size, mapped stretches).
    fn range(&self, id: SegmentId) -> Option<&(u64, MappedRuns)> {
        self.ranges.get(id.0 as usize)?.as_ref()
    }

    /// Whether every byte of `start..end` of range `id` is mapped.
    pub fn is_mapped(&self, id: SegmentId, start: u64, end: u64) -> bool {
        self.range(id)
            .is_some_and(|(_, mapped)| start >= end || mapped.covers(&(start..end)))
    }

    /// Bytes of `start..end` of range `id` that are mapped.
    pub fn mapped_within(&self, id: SegmentId, start: u64, end: u64) -> u64 {
        self.range(id)
            .map_or(0, |(_, mapped)| mapped.mapped_within(start, end))
    }

    fn would_exceed(&self, more: u64) -> bool {
        self.device_limit
            .is_some_and(|limit| self.physical_bytes().saturating_add(more) > limit)
    }

    fn note_peak(&mut self) {
        self.physical_peak = self.physical_peak.max(self.physical_bytes());
    }

    /// The page size runs must be aligned to.
    fn page(&self) -> u64 {
        self.pages.map_or(1, |p| p.page)
    }
}

/// Checks that `runs` are sorted, page aligned, non-empty and inside range `id` of `size`
/// bytes.
#[inline]
fn check_runs(id: SegmentId, size: u64, page: u64, runs: &[Range<u64>]) -> Result<(), SourceError> {
    let mut previous_end = 0;
    for run in runs {
        if run.start >= run.end
            || run.start % page != 0
            || run.end % page != 0
            || run.end > size
            || run.start < previous_end
        {
            return Err(bad_run(id, run, size, page));
        }
        previous_end = run.end;
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn bad_run(id: SegmentId, run: &Range<u64>, size: u64, page: u64) -> SourceError {
    SourceError::other(format!(
        "range {}: run {run:?} is empty, unaligned to {page} B, outside {size} B or out of \
         order",
        id.0
    ))
}

fn not_live(id: SegmentId) -> SourceError {
    SourceError::other(format!("range {} is not live", id.0))
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
        if self.range(id).is_some() {
            return Err(SourceError::other(format!(
                "range {} is already live",
                id.0
            )));
        }
        let slot = id.0 as usize;
        if self.ranges.len() <= slot {
            self.ranges.resize(slot + 1, None);
        }
        self.ranges[slot] = Some((size, MappedRuns::default()));
        self.live_ranges += 1;
        Ok(())
    }

    fn release_range(&mut self, id: SegmentId, _size: u64) {
        if let Some((_, mapped)) = self.ranges.get_mut(id.0 as usize).and_then(Option::take) {
            self.live_ranges -= 1;
            // The engine unmaps every page first; keep the counts right even if it did not.
            let still = mapped.total();
            self.mapped_bytes -= still;
            self.spare_bytes += still;
        }
    }

    fn map_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        let (page, spare, physical, limit) = (
            self.page(),
            self.spare_bytes,
            self.physical_bytes(),
            self.device_limit,
        );
        let Some(Some((size, mapped))) = self.ranges.get_mut(id.0 as usize) else {
            return Err(not_live(id));
        };
        check_runs(id, *size, page, runs)?;
        let bytes: u64 = runs.iter().map(|r| r.end - r.start).sum();
        let from_spare = bytes.min(spare);
        // `would_exceed`, with the range borrowed.
        let exceeds =
            limit.is_some_and(|limit| physical.saturating_add(bytes - from_spare) > limit);
        // Runs are sorted and disjoint: mapping one leaves the others as they were, so each
        // is checked and marked in one search, and a refusal undoes the runs marked before.
        let refused = if exceeds {
            runs.iter().find(|run| mapped.overlaps(run))
        } else {
            let marked = runs
                .iter()
                .take_while(|run| mapped.map_if_unmapped(run))
                .count();
            let refused = runs.get(marked);
            if refused.is_some() {
                runs[..marked].iter().for_each(|run| mapped.unmap(run));
            }
            refused
        };
        if let Some(run) = refused {
            return Err(SourceError::other(format!(
                "range {}: {run:?} is already partly mapped",
                id.0
            )));
        }
        if exceeds {
            return Err(SourceError::out_of_memory(format!(
                "the simulated device has {physical} bytes in use of its limit"
            )));
        }
        self.spare_bytes -= from_spare;
        self.mapped_bytes += bytes;
        self.mapped_total += bytes;
        self.bind_calls += 1;
        self.note_peak();
        Ok(())
    }

    fn unmap_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        let page = self.page();
        let Some(Some((size, mapped))) = self.ranges.get_mut(id.0 as usize) else {
            return Err(not_live(id));
        };
        check_runs(id, *size, page, runs)?;
        // As in `map_pages`: each run checked and marked in one search, undone on a refusal.
        let marked = runs
            .iter()
            .take_while(|run| mapped.unmap_if_mapped(run))
            .count();
        if let Some(run) = runs.get(marked) {
            runs[..marked].iter().for_each(|run| mapped.map(run));
            return Err(SourceError::other(format!(
                "range {}: {run:?} is not wholly mapped",
                id.0
            )));
        }
        let bytes: u64 = runs.iter().map(|r| r.end - r.start).sum();
        self.mapped_bytes -= bytes;
        self.spare_bytes += bytes;
        self.unmapped_total += bytes;
        self.bind_calls += 1;
        Ok(())
    }

    fn release_spare(&mut self, bytes: u64) {
        self.spare_bytes = self.spare_bytes.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SourceErrorKind;

    const MIB: u64 = 1 << 20;

    /// The virtual device counts what it is asked, reuses spare memory before new memory,
    /// and refuses wrong calls instead of miscounting.
    #[test]
    fn virtual_pages_count_binds_and_reuse_spare_memory() {
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
        assert_eq!(
            (device.mapped_bytes, device.spare_bytes),
            (4 * MIB, 2 * MIB)
        );
        // 6 MiB physical; mapping 6 MiB more takes the 2 spare and 4 new: 10 MiB, the limit.
        device
            .map_pages(range, std::slice::from_ref(&(10 * MIB..16 * MIB)))
            .unwrap();
        assert_eq!((device.physical_bytes(), device.spare_bytes), (10 * MIB, 0));
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
        device.release_spare(4 * MIB);
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
