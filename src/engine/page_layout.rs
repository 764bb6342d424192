//! The facts of pages mode: the engine's page sizes and ranges derived from the source's
//! [`PageMapping`] ([`PageLayout`]), the pages state an engine keeps ([`PageState`]), its
//! statistics ([`PageStats`]), and the page arithmetic every pages-mode path uses.

use std::collections::BTreeSet;

use super::size_order::SizeOrder;
use std::ops::Range;

use super::idle_queue::IdleQueue;
use super::source::PageMapping;
use super::types::MAX_SEGMENT_SIZE;

/// What page mapping has done, for the replay report and `memory_summary`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PageStats {
    /// Bytes mapped now (equal to `reserved_bytes.all.current` in pages mode).
    pub mapped_bytes: u64,
    /// Spare bytes now: unmapped and kept by the source for reuse (0 between calls).
    pub spare_bytes: u64,
    /// Peak of physical memory, mapped plus spare, since creation or `reset_peak_stats`.
    pub physical_peak: u64,
    /// Bytes mapped over the engine's life.
    pub mapped_total: u64,
    /// Bytes unmapped over the engine's life.
    pub unmapped_total: u64,
    /// Batched binds: `map_pages` and `unmap_pages` calls.
    pub bind_calls: u64,
    /// Address ranges live now.
    pub ranges: u64,
    /// Bytes of address space those ranges span.
    pub range_bytes: u64,
}

/// The page and range sizes the engine uses for each segment kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageLayout {
    /// Page size per kind: every map and unmap is whole pages of this size.
    pub page: [u64; 2],
    /// Size of a new range per kind (a multiple of its page).
    pub range_size: [u64; 2],
    /// The largest range the source allows, per kind, rounded down to its page.
    pub max_range: [u64; 2],
}

impl PageLayout {
    /// Pages of `small` and `large` bytes (rounded up to the device's page, and down to the
    /// largest range where they exceed it, as segments are bounded by the largest segment),
    /// and ranges of 9/8 of the device memory where known (room to unmap pages early in a
    /// range and map them at its end, as PyTorch reserves), else the source's range size
    /// ([`PageMapping::range`]), and never more than it.
    ///
    /// Every range size the layout allows, `max_range` included, is a whole number of its
    /// kind's pages and at most [`PageMapping::max_range`] (`mapping` holds at least one
    /// device page: `max_range >= page`).
    pub fn new(mapping: PageMapping, small: u64, large: u64, device_memory: Option<u64>) -> Self {
        let device_page = mapping.page.max(1);
        // The largest range in whole device pages.
        let largest = mapping.max_range.min(MAX_SEGMENT_SIZE) / device_page * device_page;
        debug_assert!(largest >= device_page, "{mapping:?} holds no page");
        let page = [small, large].map(|p| {
            p.max(device_page)
                .div_ceil(device_page)
                .saturating_mul(device_page)
                .min(largest)
        });
        let max_range = page.map(|p| largest / p * p);
        let preferred = mapping.range.min(largest);
        let range_size = [0, 1].map(|kind| {
            let p = page[kind];
            let usual = (preferred / p * p).clamp(p, max_range[kind]);
            let wanted = device_memory.map_or(usual, |d| d.saturating_add(d / 8));
            wanted.div_ceil(p).saturating_mul(p).clamp(p, usual)
        });
        PageLayout {
            page,
            range_size,
            max_range,
        }
    }
}

/// The order in which a policy looks for unmapped blocks: the engine keeps one index of
/// them, in that order (keeping both would cost every map and unmap two more tree updates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnmappedOrder {
    /// By (stream, size, address): the compact policy's search for the cheapest place.
    Size,
    /// By (stream, address): PyTorch's expandable segments, lowest address first.
    Address,
}

/// Pages mode's part of the engine state.
#[derive(Debug)]
pub(crate) struct PageState {
    pub layout: Option<PageLayout>,
    /// The layout's page per kind (1 with fixed segments), read on every split and free.
    pub page: [u64; 2],
    /// Which of the two indexes below is kept; the other stays empty.
    pub order: UnmappedOrder,
    /// Unmapped blocks per kind, by (stream, size, address, block): the nearest sizes
    /// above and below a request. One ordered set rather than size classes as for free blocks: unmapped
    /// blocks are few and of scattered sizes, so size classes would hold one block each
    /// and every step of a search would jump to another class.
    pub unmapped_by_size: [SizeOrder; 2],
    /// Unmapped blocks per kind, by (stream, address, block): lowest address first.
    pub unmapped_by_address: [BTreeSet<(u32, u64, u32)>; 2],
    /// Free mapped blocks that hold at least one whole page, least recently freed first.
    pub idle_pages: IdleQueue,
    /// Allocated blocks whose whole interior pages are unmapped (see the `evict` module), by
    /// record, with that run.
    pub evicted: std::collections::HashMap<u32, Range<u64>>,
    pub stats: PageStats,
    /// Buffers that unmapping reuses (the planned runs, one range's runs), so that a miss
    /// that recycles pages allocates nothing. Empty between calls.
    pub scratch_plans: Vec<(u32, u32, Range<u64>)>,
    pub scratch_runs: Vec<Range<u64>>,
}

impl Default for PageState {
    /// The empty state of segments mode.
    fn default() -> Self {
        PageState {
            layout: None,
            page: [1, 1],
            order: UnmappedOrder::Size,
            unmapped_by_size: [SizeOrder::default(), SizeOrder::default()],
            unmapped_by_address: [BTreeSet::new(), BTreeSet::new()],
            idle_pages: IdleQueue::default(),
            evicted: std::collections::HashMap::new(),
            stats: PageStats::default(),
            scratch_plans: Vec::new(),
            scratch_runs: Vec::new(),
        }
    }
}

impl PageState {
    pub fn new(layout: PageLayout, order: UnmappedOrder) -> PageState {
        PageState {
            layout: Some(layout),
            page: layout.page,
            order,
            ..PageState::default()
        }
    }
}

/// `bytes` rounded up to whole pages of `page` bytes. The default policy's pages are
/// powers of two, and a mask spares the division (tens of cycles) on its hot paths: every
/// split and free asks [`holds_page`], every miss rounds a few dozen candidate places.
#[inline]
pub(crate) fn round_up_to_page(bytes: u64, page: u64) -> u64 {
    if page.is_power_of_two() {
        (bytes + page - 1) & !(page - 1)
    } else {
        bytes.div_ceil(page) * page
    }
}

/// Whether `offset..offset + size` holds a whole page of `page` bytes. A size of two pages
/// (less a byte) always does, and one below a page never does: only sizes in between (a
/// minority of the blocks split and freed) pay for the rounding.
#[inline]
pub(crate) fn holds_page(offset: u64, size: u64, page: u64) -> bool {
    // The first page boundary is less than a page past `offset`.
    if size >= 2 * page - 1 {
        return true;
    }
    if size < page {
        return false;
    }
    round_up_to_page(offset, page) + page <= offset + size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_pages_are_found_at_any_offset() {
        // A power of two (the default policy's pages) and not (PyTorch's 20 MiB pages).
        for page in [2 << 20, 20 << 20] {
            assert!(holds_page(0, page, page));
            assert!(!holds_page(512, page, page));
            assert!(holds_page(512, 2 * page - 512, page));
            assert!(!holds_page(512, 2 * page - 1024, page));
            assert!(holds_page(page, page, page) && !holds_page(page, page - 512, page));
        }
        // Every offset and size of a few small pages, against the definition: some page
        // boundary k * page with k * page + page inside the range.
        for page in [4u64, 6, 8] {
            for offset in 0..3 * page {
                for size in 0..4 * page {
                    let whole = (0..=offset / page + 1)
                        .any(|k| k * page >= offset && k * page + page <= offset + size);
                    assert_eq!(
                        holds_page(offset, size, page),
                        whole,
                        "{offset} {size} {page}"
                    );
                }
            }
        }
    }

    #[test]
    fn layouts_round_pages_and_ranges() {
        let h200 = PageMapping::new(64 << 10, 1 << 40);
        let layout = PageLayout::new(h200, 2 << 20, 20 << 20, Some(140 << 30));
        assert_eq!(layout.page, [2 << 20, 20 << 20]);
        let wanted: u64 = (140 << 30) + (140 << 30) / 8;
        assert_eq!(layout.range_size[0], wanted.div_ceil(2 << 20) * (2 << 20));
        assert_eq!(layout.range_size[1] % (20 << 20), 0);
        // A source's range size bounds ranges; the largest range stays the device's.
        let shared = h200.with_range(16 << 30);
        let layout = PageLayout::new(shared, 2 << 20, 20 << 20, Some(140 << 30));
        assert_eq!(
            layout.range_size,
            [16 << 30, (16 << 30) / (20 << 20) * (20 << 20)]
        );
        assert_eq!(
            layout.max_range,
            [1 << 40, (1 << 40) / (20 << 20) * (20 << 20)]
        );
        // A device page larger than asked rounds pages up; no device size: the largest.
        let coarse = PageMapping::new(4 << 20, 1 << 30);
        let layout = PageLayout::new(coarse, 2 << 20, 20 << 20, None);
        assert_eq!(layout.page, [4 << 20, 20 << 20]);
        assert_eq!(
            layout.range_size,
            [1 << 30, (1 << 30) / (20 << 20) * (20 << 20)]
        );
    }

    /// Issue 25: a page larger than the device's largest range (lavapipe: 2 GiB less 4 KiB;
    /// `large_segment_size_mb:2048` asks for 2 GiB large pages) is clamped to it, as a
    /// segment is clamped to the largest segment: no range the layout allows exceeds the
    /// device's largest, and every one is whole pages.
    #[test]
    fn pages_larger_than_the_largest_range_are_clamped_to_it() {
        const MIB: u64 = 1 << 20;
        let lavapipe = PageMapping::new(4096, (2 << 30) - 4096).with_range(64 * MIB);
        for large_mb in [2047, 2048, 2049, 4096, 2_097_151] {
            for device_memory in [None, Some(256 * MIB), Some(64 << 30)] {
                let layout = PageLayout::new(lavapipe, 2 * MIB, large_mb * MIB, device_memory);
                let wanted = (large_mb * MIB).min(lavapipe.max_range);
                assert_eq!(layout.page, [2 * MIB, wanted], "{large_mb} MiB");
                for kind in 0..2 {
                    let (page, max) = (layout.page[kind], layout.max_range[kind]);
                    assert!(max <= lavapipe.max_range && max >= page && max % page == 0);
                    let range = layout.range_size[kind];
                    assert!(range <= max && range >= page && range % page == 0);
                }
            }
        }
        // The engine's bound applies too: an H200's 1 TiB with a page of 1 TiB and 1 MiB.
        let h200 = PageMapping::new(64 << 10, 1 << 40);
        let layout = PageLayout::new(h200, 2 * MIB, (1 << 40) + MIB, None);
        assert_eq!(layout.page[1], 1 << 40);
        assert_eq!(layout.max_range[1], 1 << 40);
    }
}
