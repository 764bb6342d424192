//! Page-mapped memory as the engine's [`SegmentSource`]: address ranges, batched maps and
//! unmaps, and held memory released on request.

use std::ops::Range;

use crate::engine::{PageMapping, SegmentId, SegmentKind, SegmentSource, SourceError};

use super::error::SparseError;
use super::paged::PagedMemory;

impl From<SparseError> for SourceError {
    /// Out-of-memory errors (memory, address space) go down the engine's retry chain; others
    /// do not. An error wgpu raised comes back as wgpu's own [`CaughtError`], as it does
    /// from a segment buffer, so that callers see the same error in both memory modes.
    ///
    /// [`CaughtError`]: crate::gpu::scope::CaughtError
    fn from(error: SparseError) -> SourceError {
        if let SparseError::Gpu(caught) = error {
            return if error_is_oom(&caught) {
                SourceError::out_of_memory(caught)
            } else {
                SourceError::other(caught)
            };
        }
        if matches!(error, SparseError::AddressSpace { .. }) {
            SourceError::address_space(error)
        } else if error.is_out_of_memory() {
            SourceError::out_of_memory(error)
        } else {
            SourceError::other(error)
        }
    }
}

fn error_is_oom(caught: &crate::gpu::scope::CaughtError) -> bool {
    matches!(caught, crate::gpu::scope::CaughtError::OutOfMemory(_))
}

fn runs_of(ranges: &[Range<u64>]) -> Vec<(u64, u64)> {
    ranges.iter().map(|r| (r.start, r.end - r.start)).collect()
}

/// How many ranges of the usual size the device's address space holds: it is shared by
/// every pool on the device and both kinds of each (small and large blocks), so that 16
/// pools find room (lavapipe: 2 GiB of address space, ranges of 64 MiB).
const RANGES_PER_ADDRESS_SPACE: u64 = 32;

impl PagedMemory {
    /// The size of the address ranges the engine reserves for blocks that fit in one: a
    /// 32nd of the device's sparse address space (every pool on the device shares it), and
    /// no more than the device memory rounded up to a power of two (a range larger than the
    /// device could never be filled). 64 MiB on lavapipe (2 GiB of address space), 32 GiB
    /// on an H200 (1 TiB). A larger block gets a range of its own size, up to
    /// [`max_range`](Self::max_range).
    pub fn range_size(&self) -> u64 {
        let facts = self.sparse().facts();
        let page = facts.page_size;
        let share = facts.address_space / RANGES_PER_ADDRESS_SPACE;
        let memory = facts
            .heap_size
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX);
        let size = self.max_range().min(share).min(memory);
        (size / page * page).max(page)
    }

    /// The largest range the pool can reserve, hence its largest block in pages mode: the
    /// device's largest buffer (Vulkan's and wgpu's `max_buffer_size`) within its sparse
    /// address space, rounded down to the page. 2 GiB - 4 KiB on lavapipe. Such a range is
    /// reserved only when the address space has room for it beside every other pool's.
    pub fn max_range(&self) -> u64 {
        let facts = self.sparse().facts();
        let page = facts.page_size;
        let size = facts.max_range_size.min(self.max_buffer_size());
        (size / page * page).max(page)
    }
}

/// The engine's view of held memory is kept in `PagedMemory::engine_held`: memory the
/// engine unmapped and has neither mapped again nor released. Chunks free memory only as
/// whole chunks, so after `release_held` some of the engine's released bytes may still sit
/// in chunks that are partly in use: the next maps use them before any new chunk is
/// allocated, and later releases free them once their chunk is idle.
impl SegmentSource for PagedMemory {
    /// A fixed segment on a page-mapping device: a range of its own, wholly mapped.
    fn create_segment(
        &mut self,
        id: SegmentId,
        size: u64,
        _kind: SegmentKind,
    ) -> Result<(), SourceError> {
        let page = self.page_size();
        let size = size.div_ceil(page) * page;
        self.reserve_range(id.0, size)?;
        if let Err(error) = self.map(id.0, &[(0, size)]) {
            let _ = self.release_range(id.0);
            return Err(error.into());
        }
        Ok(())
    }

    fn release_segment(&mut self, id: SegmentId, size: u64) {
        let _ = size;
        // A failure here is a lost device: nothing is left to give back. The segment's
        // memory is not held as the engine counts it, so it is freed.
        if self.release_range(id.0).is_ok() {
            self.release_owed();
        }
    }

    fn page_mapping(&self) -> Option<PageMapping> {
        Some(PageMapping::new(self.page_size(), self.max_range()).with_range(self.range_size()))
    }

    fn reserve_range(
        &mut self,
        id: SegmentId,
        size: u64,
        _kind: SegmentKind,
    ) -> Result<(), SourceError> {
        Ok(PagedMemory::reserve_range(self, id.0, size)?)
    }

    fn release_range(&mut self, id: SegmentId, _size: u64) {
        // No page is mapped (the engine unmapped them), so this is address space only and
        // cannot fail on a live device.
        let _ = PagedMemory::release_range(self, id.0);
    }

    fn map_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        let runs = runs_of(runs);
        self.map(id.0, &runs)?;
        let bytes: u64 = runs.iter().map(|&(_, len)| len).sum();
        self.engine_held = self.engine_held.saturating_sub(bytes);
        Ok(())
    }

    fn unmap_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        let runs = runs_of(runs);
        self.unmap(id.0, &runs)?;
        self.engine_held += runs.iter().map(|&(_, len)| len).sum::<u64>();
        Ok(())
    }

    fn release_held(&mut self, bytes: u64) {
        self.engine_held = self.engine_held.saturating_sub(bytes);
        self.release_owed();
    }
}

impl PagedMemory {
    /// Frees idle chunks up to the memory held beyond what the engine counts as held.
    fn release_owed(&mut self) {
        let owed = self.idle_bytes().saturating_sub(self.engine_held);
        self.release_idle(owed);
    }
}
