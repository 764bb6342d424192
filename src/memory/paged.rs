//! Pages-mode memory as the engine's [`SegmentSource`]: [`PagedSource`] puts the Vulkan
//! driver's [`PagedMemory`] (address ranges, batched maps and unmaps, spare memory) and the
//! wrappers blocks are reached through behind the engine's page operations.

use std::ops::Range;

use crate::engine::{Allocation, PageMapping, SegmentId, SegmentKind, SegmentSource, SourceError};
use crate::gpu::scope::CaughtError;
use crate::gpu::sparse::{PagedMemory, SparseError, SparseFacts};

use super::wrappers::{WorkClock, Wrappers};

impl From<SparseError> for SourceError {
    /// Out-of-memory errors (memory, address space) go down the engine's retry chain; others
    /// do not. An error wgpu raised comes back as wgpu's own [`CaughtError`], as it does
    /// from a segment buffer, so that callers see the same error in both memory modes.
    fn from(error: SparseError) -> SourceError {
        if let SparseError::Gpu(caught) = error {
            return if matches!(caught, CaughtError::OutOfMemory(_)) {
                SourceError::out_of_memory(caught)
            } else {
                SourceError::other(caught)
            };
        }
        if matches!(
            error,
            SparseError::AddressSpace { .. } | SparseError::RangeRefused { .. }
        ) {
            SourceError::address_space(error)
        } else if error.is_out_of_memory() {
            SourceError::out_of_memory(error)
        } else {
            SourceError::other(error)
        }
    }
}

/// What a device with `facts` offers the engine for page mapping, where wgpu's largest
/// buffer is `max_buffer_size`: its page, its largest range
/// ([`SparseFacts::max_range`]) and the usual range ([`SparseFacts::range_size`]).
pub(crate) fn page_mapping_of(facts: &SparseFacts, max_buffer_size: u64) -> PageMapping {
    PageMapping::new(facts.page_size, facts.max_range(max_buffer_size))
        .with_range(facts.range_size(max_buffer_size))
}

fn runs_of(ranges: &[Range<u64>]) -> Vec<(u64, u64)> {
    ranges.iter().map(|r| (r.start, r.end - r.start)).collect()
}

/// One pool's pages-mode memory as a [`SegmentSource`], and the wgpu wrappers its blocks
/// are reached through.
///
/// Guarantees, beyond the trait's:
/// - spare memory as the engine counts it is the memory it unmapped and has neither mapped
///   again nor released. Chunks free memory only as whole chunks, so after `release_spare`
///   some of the engine's released bytes may still sit in chunks that are partly in use:
///   the next maps use them before any new chunk is allocated, and later releases free
///   them once their chunk is idle;
/// - a fixed segment (`create_segment`) is a range of its own, wholly mapped, and its
///   memory is freed with it.
pub struct PagedSource {
    memory: PagedMemory,
    /// Spare memory as the engine counts it (see the guarantees).
    engine_spare: u64,
    /// The wrappers of every range (see [`wrappers`](super::wrappers)).
    wrappers: Wrappers,
}

impl PagedSource {
    /// The engine's source over `memory`.
    pub fn new(memory: PagedMemory) -> PagedSource {
        PagedSource {
            memory,
            engine_spare: 0,
            wrappers: Wrappers::default(),
        }
    }

    /// The pages-mode memory behind the source.
    pub fn memory(&self) -> &PagedMemory {
        &self.memory
    }

    /// The pages-mode memory behind the source, for its settings (a limit, a work clock).
    /// Maps and unmaps made through it directly are not counted as the engine's.
    pub fn memory_mut(&mut self) -> &mut PagedMemory {
        &mut self.memory
    }

    /// The buffer a new block at `allocation` is reached through, the index of that
    /// wrapper, and the stamp of unsettled work it takes over (see
    /// [`wrappers`](super::wrappers), which may order GPU work first).
    pub(crate) fn block_buffer(&mut self, allocation: &Allocation) -> (&wgpu::Buffer, u32, u64) {
        self.wrappers.assign(
            &mut self.memory,
            allocation.segment.0,
            allocation.offset,
            allocation.block_size,
        )
    }

    /// Notes the block of `capacity` bytes at `offset` of range `id`, reached through
    /// `wrapper`, freed after the GPU work `gpu_work` and the unsettled work `inherited` it
    /// took over.
    pub(crate) fn block_freed(
        &mut self,
        id: u32,
        offset: u64,
        capacity: u64,
        wrapper: u32,
        (gpu_work, inherited): (u8, u64),
    ) {
        let stamp = self.wrappers.clock.stamp(gpu_work, inherited);
        self.wrappers.freed(id, offset, capacity, wrapper, stamp);
    }

    /// Sets the device's work clock: what freed bytes need ordering, and when an unbind
    /// needs a signal of its own.
    pub(crate) fn set_work_clock(&mut self, clock: WorkClock) {
        if let Some(points) = clock.counted_points() {
            self.memory.set_work_clock(points);
        }
        self.wrappers.clock = clock;
    }

    /// Times a new block overlapped freed bytes reached through other wrappers, so that GPU
    /// work was ordered first.
    pub(crate) fn wrapper_orderings(&self) -> u64 {
        self.wrappers.orderings
    }

    /// Frees free chunks up to the unmapped memory beyond what the engine counts as spare.
    fn release_owed(&mut self) {
        let owed = self.memory.idle_bytes().saturating_sub(self.engine_spare);
        self.memory.release_idle(owed);
    }
}

impl SegmentSource for PagedSource {
    /// A fixed segment on a page-mapping device: a range of its own, wholly mapped.
    fn create_segment(
        &mut self,
        id: SegmentId,
        size: u64,
        _kind: SegmentKind,
    ) -> Result<(), SourceError> {
        let page = self.memory.page_size();
        let size = size.div_ceil(page) * page;
        self.memory.reserve_range(id.0, size)?;
        if let Err(error) = self.memory.map(id.0, &[(0, size)]) {
            let _ = self.memory.release_range(id.0);
            return Err(error.into());
        }
        Ok(())
    }

    fn release_segment(&mut self, id: SegmentId, size: u64) {
        let _ = size;
        // A failure here is a lost device: nothing is left to give back. The segment's
        // memory is not spare as the engine counts it, so it is freed.
        if self.memory.release_range(id.0).is_ok() {
            self.release_owed();
        }
    }

    fn page_mapping(&self) -> Option<PageMapping> {
        Some(page_mapping_of(
            &self.memory.sparse().facts(),
            self.memory.max_buffer_size(),
        ))
    }

    fn reserve_range(
        &mut self,
        id: SegmentId,
        size: u64,
        _kind: SegmentKind,
    ) -> Result<(), SourceError> {
        Ok(self.memory.reserve_range(id.0, size)?)
    }

    fn release_range(&mut self, id: SegmentId, _size: u64) {
        self.wrappers.released(id.0);
        // No page is mapped (the engine unmapped them), so this is address space only and
        // cannot fail on a live device.
        let _ = self.memory.release_range(id.0);
    }

    fn map_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        let runs = runs_of(runs);
        self.memory.map(id.0, &runs)?;
        let bytes: u64 = runs.iter().map(|&(_, len)| len).sum();
        self.engine_spare = self.engine_spare.saturating_sub(bytes);
        Ok(())
    }

    fn unmap_pages(&mut self, id: SegmentId, runs: &[Range<u64>]) -> Result<(), SourceError> {
        let runs = runs_of(runs);
        self.memory.unmap(id.0, &runs)?;
        self.engine_spare += runs.iter().map(|&(_, len)| len).sum::<u64>();
        Ok(())
    }

    fn release_spare(&mut self, bytes: u64) {
        self.engine_spare = self.engine_spare.saturating_sub(bytes);
        self.release_owed();
    }
}

impl std::fmt::Debug for PagedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagedSource")
            .field("memory", &self.memory)
            .field("engine_spare", &self.engine_spare)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SourceErrorKind;

    /// The engine sees the device's page, its largest range and the usual range.
    #[test]
    fn page_mapping_follows_the_device_facts() {
        let lavapipe = SparseFacts {
            page_size: 4096,
            address_space: 2 << 30,
            reported_address_space: 2 << 30,
            max_range_size: 2 << 30,
            own_queue: false,
            memory_type: 0,
            heap_size: 8 << 30,
            heap_index: 0,
            memory_budget: false,
        };
        let mapping = page_mapping_of(&lavapipe, u64::MAX);
        assert_eq!(
            (mapping.page, mapping.max_range, mapping.range),
            (4096, 2 << 30, 64 << 20)
        );
    }

    /// Memory and address space run out for the retry chain; anything else does not.
    #[test]
    fn sparse_errors_keep_their_kind_for_the_engine() {
        let out_of_memory = SparseError::OutOfMemory {
            bytes: 1 << 20,
            result: ash::vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
        };
        let address_space = SparseError::AddressSpace {
            requested: 1 << 30,
            in_use: 1 << 30,
            total: 2 << 30,
        };
        // NVIDIA's driver refuses sparse buffers before the address space it reports.
        let refused = SparseError::RangeRefused {
            requested: 4 << 30,
            in_use: 400 << 30,
            total: 512 << 30,
            result: ash::vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
        };
        let message = refused.to_string();
        assert!(
            message.contains("driver refused a sparse range of 4.00 GiB")
                && message.contains("address space ran out")
                && !message.contains("vkAllocateMemory"),
            "{message}"
        );
        let invalid = SparseError::Invalid("range 3 is not reserved".into());
        let kinds =
            [out_of_memory, address_space, refused, invalid].map(|e| SourceError::from(e).kind());
        assert_eq!(
            kinds,
            [
                SourceErrorKind::OutOfMemory,
                SourceErrorKind::AddressSpace,
                SourceErrorKind::AddressSpace,
                SourceErrorKind::Other
            ]
        );
    }
}
