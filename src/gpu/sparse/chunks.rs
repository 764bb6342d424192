//! Physical memory: `VkDeviceMemory` chunks, each cut into pages that are bound into ranges.
//!
//! A chunk is allocated when a map needs more pages than the free ones, and freed only when
//! none of its pages is bound. Allocating costs about 0.2 ms a call plus 20 to 36 us per MiB
//! on an H200 (more as the device fills), so chunks grow with the memory already in chunks
//! and the device ([`ChunkPolicy`]): few calls, and under 1% of the memory left unbound.
//!
//! With a reserve ([`Chunks::set_reserve`]), chunks of the preferred size are allocated
//! ahead of demand on a thread of the reserve's own ([`reserve`](super::reserve)): a map
//! that needs memory takes ready chunks first, and only what they do not cover is allocated
//! on the caller's thread.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ash::vk;

use super::device::SparseDevice;
use super::error::SparseError;
use super::reserve::Reserve;

/// How large new chunks are.
///
/// A map that finds too few free pages allocates one chunk. Its size is the *preferred*
/// chunk ([`chunk_size`](Self::chunk_size): the memory in chunks divided by
/// [`divisor`](Self::divisor), at least the device memory divided by
/// [`device_divisor`](Self::device_divisor), within `min_chunk..=max_chunk`), or, when the
/// shortfall is larger, the shortfall plus (with [`spare_on_large`](Self::spare_on_large))
/// the preferred chunk, so that the maps after a large one find free pages instead of each
/// allocating a chunk of its own. Every size is a multiple of [`granule`](Self::granule).
///
/// Guarantee: a chunk is allocated only when the free and spare pages cannot serve a map,
/// and after that map fewer than one preferred chunk plus one granule of pages are left
/// unmapped; so device memory exceeds what is mapped or spare for the engine by less than
/// that. A reserve ([`PagedMemory::set_reserve`](super::PagedMemory::set_reserve)) adds at
/// most its count of preferred chunks without the device's floor to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChunkPolicy {
    /// The smallest chunk, in bytes (rounded up to whole pages).
    pub min_chunk: u64,
    /// The largest preferred chunk (a single map larger than this still gets one chunk of
    /// its size).
    pub max_chunk: u64,
    /// The preferred chunk is the memory in chunks so far divided by this, rounded down to
    /// a power of two, within `min_chunk..=max_chunk`.
    pub divisor: u64,
    /// The preferred chunk is at least the device memory divided by this (0: no such
    /// floor): on a large device, the first gigabytes then take a few calls rather than
    /// hundreds of 2 MiB ones.
    pub device_divisor: u64,
    /// Every chunk is a multiple of this many bytes (rounded up to whole pages). 2 MiB by
    /// default: drivers back device memory with 2 MiB pages where they can.
    pub granule: u64,
    /// Whether a map larger than the preferred chunk allocates the preferred chunk on top of
    /// its shortfall, in the same call.
    pub spare_on_large: bool,
    /// Whether a map binds free pages (one free run, up to a preferred chunk) right after its
    /// end, so that the next map there needs no bind call
    /// ([`PagedMemory::map`](super::PagedMemory::map)).
    pub bind_spare: bool,
}

impl Default for ChunkPolicy {
    /// Chunks of 1/128 of the memory in chunks and at least 1/2048 of the device memory
    /// (70 MiB on an H200 with 140 GiB), from 2 MiB to 256 MiB, in 2 MiB granules, with spare
    /// pages after a large map: the memory in chunks but not mapped stays under the larger of
    /// 0.8% of the memory in chunks and 0.05% of the device, plus a granule.
    fn default() -> Self {
        ChunkPolicy {
            min_chunk: 2 << 20,
            max_chunk: 256 << 20,
            divisor: 128,
            device_divisor: 2048,
            granule: 2 << 20,
            spare_on_large: true,
            bind_spare: true,
        }
    }
}

impl ChunkPolicy {
    /// Sets the smallest chunk.
    pub fn with_min_chunk(mut self, bytes: u64) -> Self {
        self.min_chunk = bytes;
        self
    }

    /// Sets the largest preferred chunk.
    pub fn with_max_chunk(mut self, bytes: u64) -> Self {
        self.max_chunk = bytes;
        self
    }

    /// Sets the ratio of memory in chunks to a new chunk.
    pub fn with_divisor(mut self, divisor: u64) -> Self {
        self.divisor = divisor.max(1);
        self
    }

    /// Sets the ratio of device memory to the smallest preferred chunk (0: none).
    pub fn with_device_divisor(mut self, divisor: u64) -> Self {
        self.device_divisor = divisor;
        self
    }

    /// Sets the granule every chunk size is a multiple of.
    pub fn with_granule(mut self, bytes: u64) -> Self {
        self.granule = bytes;
        self
    }

    /// Sets whether a large map allocates a preferred chunk on top of its shortfall.
    pub fn with_spare_on_large(mut self, spare: bool) -> Self {
        self.spare_on_large = spare;
        self
    }

    /// Sets whether maps bind spare pages after their end.
    pub fn with_bind_spare(mut self, bind: bool) -> Self {
        self.bind_spare = bind;
        self
    }

    /// The preferred size of the next chunk when `in_chunks` bytes are in chunks on a device
    /// of `device_memory` bytes, and `page` is the page.
    pub fn chunk_size(&self, in_chunks: u64, device_memory: u64, page: u64) -> u64 {
        let grown = in_chunks / self.divisor.max(1);
        let grown = if grown == 0 {
            0
        } else {
            1u64 << (63 - grown.leading_zeros())
        };
        let floor = device_memory.checked_div(self.device_divisor).unwrap_or(0);
        let size = grown
            .max(floor)
            .clamp(self.min_chunk, self.max_chunk.max(self.min_chunk));
        self.round(size, page)
    }

    /// The size of the chunk a map allocates when it lacks `shortfall` bytes and `in_chunks`
    /// bytes are in chunks on a device of `device_memory` bytes: at least `shortfall`, a
    /// multiple of the granule and the page.
    ///
    /// ```
    /// use wgpool::gpu::sparse::ChunkPolicy;
    ///
    /// let policy = ChunkPolicy::default();
    /// let page = 64 << 10;
    /// let device = 16 << 30; // the floor is 8 MiB
    /// // 4 GiB in chunks: the preferred chunk is 32 MiB.
    /// assert_eq!(policy.chunk_for(1 << 20, 4 << 30, device, page), 32 << 20);
    /// // A 100 MiB shortfall gets 100 MiB plus a preferred chunk.
    /// assert_eq!(policy.chunk_for(100 << 20, 4 << 30, device, page), 132 << 20);
    /// // Nothing in chunks yet: the device's floor.
    /// assert_eq!(policy.chunk_for(1 << 20, 0, device, page), 8 << 20);
    /// ```
    pub fn chunk_for(&self, shortfall: u64, in_chunks: u64, device_memory: u64, page: u64) -> u64 {
        let preferred = self.chunk_size(in_chunks, device_memory, page);
        if shortfall <= preferred {
            return preferred;
        }
        let size = if self.spare_on_large {
            shortfall.saturating_add(preferred)
        } else {
            shortfall
        };
        self.round(size, page)
    }

    /// `size` rounded up to the granule and the page.
    fn round(&self, size: u64, page: u64) -> u64 {
        let granule = self.whole_granule(page);
        size.div_ceil(granule).saturating_mul(granule)
    }

    /// `size` rounded down to the granule and the page.
    pub(crate) fn round_down(&self, size: u64, page: u64) -> u64 {
        let granule = self.whole_granule(page);
        size / granule * granule
    }

    /// The granule rounded up to whole pages.
    fn whole_granule(&self, page: u64) -> u64 {
        let page = page.max(1);
        self.granule.max(1).div_ceil(page) * page
    }
}

/// A run of physical pages: `pages` pages of chunk `chunk` from page `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PhysicalRun {
    pub chunk: u32,
    pub first: u32,
    pub pages: u32,
}

struct Chunk {
    memory: vk::DeviceMemory,
    pages: u32,
    /// Free runs of this chunk: first page -> length.
    free: BTreeMap<u32, u32>,
    free_pages: u32,
}

/// Driver time and call counts of the chunk allocator.
///
/// `time` is what callers waited for: their own `vkAllocateMemory` and `vkFreeMemory`
/// calls, and their waits for a reserve allocation in flight. The reserve's thread's time is
/// `background_time`, apart: it overlaps the callers' work and is not on their path.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ChunkCounters {
    /// `vkAllocateMemory` calls that succeeded, on any thread (the reserve's included), so
    /// that `allocations - frees` is the chunks held, the reserve's included.
    pub allocations: u64,
    /// `vkFreeMemory` calls (chunks and the reserve's unused chunks).
    pub frees: u64,
    /// Time callers spent in `vkAllocateMemory` and `vkFreeMemory` (failed calls
    /// included), and waiting for a reserve allocation in flight.
    pub time: Duration,
    /// Of `allocations`: those made by the reserve's thread.
    pub background_allocations: u64,
    /// Allocations on the reserve's thread that failed (each stops the reserve until memory
    /// is released).
    pub background_failures: u64,
    /// Time on the reserve's thread in `vkAllocateMemory`, failed calls included; not in
    /// `time`.
    pub background_time: Duration,
    /// Chunks taken from the reserve by maps.
    pub reserve_taken: u64,
    /// Of `reserve_taken`: those a map had to wait for (still being allocated).
    pub reserve_waits: u64,
}

/// Every chunk of one pool, and its free pages.
pub(crate) struct Chunks {
    page: u64,
    policy: ChunkPolicy,
    /// The device memory the policy's floor is a fraction of.
    device_memory: u64,
    chunks: Vec<Option<Chunk>>,
    /// Free runs of every chunk ordered by (length, chunk, first): best fit first.
    by_length: BTreeSet<(u32, u32, u32)>,
    free_pages: u64,
    /// Bytes in chunks (the reserve's not included).
    device_bytes: u64,
    /// The peak of bytes in chunks and in the reserve together.
    device_bytes_peak: u64,
    counters: ChunkCounters,
    /// Chunks allocated ahead of demand; empty with `reserve_chunks` 0.
    reserve: Reserve,
    /// How many preferred chunks the reserve keeps (0: no reserve).
    reserve_chunks: u32,
}

impl Chunks {
    pub fn new(page: u64, policy: ChunkPolicy, device_memory: u64) -> Chunks {
        Chunks {
            page,
            policy,
            device_memory,
            chunks: Vec::new(),
            by_length: BTreeSet::new(),
            free_pages: 0,
            device_bytes: 0,
            device_bytes_peak: 0,
            counters: ChunkCounters::default(),
            reserve: Reserve::new(),
            reserve_chunks: 0,
        }
    }

    /// Keeps `chunks` chunks allocated ahead of demand beyond the free pages the policy
    /// leaves, refilled after each map that grew ([`refill`](Self::refill); 0: no reserve,
    /// the default). A smaller count takes effect as the reserve is used or released.
    pub fn set_reserve(&mut self, chunks: u32) {
        self.reserve_chunks = chunks;
    }

    /// Counters so far, the reserve's thread's included.
    pub fn counters(&self) -> ChunkCounters {
        let work = self.reserve.work();
        let mut counters = self.counters;
        counters.allocations += work.allocations;
        counters.background_allocations = work.allocations;
        counters.background_failures = work.failures;
        counters.background_time = work.time;
        counters
    }

    /// Device memory this pool holds: bytes in chunks and in the reserve (allocated, or
    /// ordered and being allocated).
    pub fn device_bytes(&self) -> u64 {
        self.device_bytes + self.reserve.held()
    }

    /// Blocks until the reserve's orders are allocated (or failed).
    pub fn settle_reserve(&self) {
        self.reserve.settle();
    }

    /// Bytes in the reserve: allocated ahead of demand, or ordered and being allocated.
    pub fn reserve_bytes(&self) -> u64 {
        self.reserve.held()
    }

    /// The peak of [`device_bytes`](Self::device_bytes).
    pub fn device_bytes_peak(&self) -> u64 {
        self.device_bytes_peak
    }

    /// Bytes of chunk pages not bound anywhere.
    pub fn free_bytes(&self) -> u64 {
        self.free_pages * self.page
    }

    /// Pages not taken.
    pub fn free_pages(&self) -> u64 {
        self.free_pages
    }

    /// Whether maps bind spare pages.
    pub fn binds_spare(&self) -> bool {
        self.policy.bind_spare
    }

    /// The preferred size of the next chunk, in pages.
    pub fn preferred_pages(&self) -> u64 {
        self.policy
            .chunk_size(self.device_bytes, self.device_memory, self.page)
            / self.page
    }

    /// Number of live chunks.
    pub fn count(&self) -> usize {
        self.chunks.iter().flatten().count()
    }

    /// The memory of every live chunk.
    pub fn memories(&self) -> Vec<vk::DeviceMemory> {
        self.chunks.iter().flatten().map(|c| c.memory).collect()
    }

    /// The memory of chunk `chunk`.
    pub fn memory(&self, chunk: u32) -> vk::DeviceMemory {
        self.chunks[chunk as usize]
            .as_ref()
            .expect("runs name live chunks")
            .memory
    }

    /// Takes `pages` free pages, allocating chunks first if there are too few; the total
    /// in chunks stays at most `limit` bytes. Few runs: one where a free run fits.
    pub fn take(
        &mut self,
        sparse: &SparseDevice,
        pages: u64,
        limit: Option<u64>,
    ) -> Result<Vec<PhysicalRun>, SparseError> {
        let grew = pages > self.free_pages;
        if grew {
            self.grow(sparse, (pages - self.free_pages) * self.page, limit)?;
        }
        let mut runs = Vec::new();
        let mut left = pages;
        while left > 0 {
            let run = self.take_run(left).expect("enough free pages were ensured");
            left -= u64::from(run.pages);
            runs.push(run);
        }
        if grew {
            self.refill(sparse, limit);
        }
        Ok(runs)
    }

    /// Takes up to `pages` free pages from one free run, allocating nothing: the shortest
    /// run that holds them all, else the longest (so at most `pages` pages, one run and one
    /// bind entry however fragmented the free pages are); `None` when no page is free.
    pub fn take_run(&mut self, pages: u64) -> Option<PhysicalRun> {
        let want = pages.min(u32::MAX as u64) as u32;
        if want == 0 {
            return None;
        }
        let (length, chunk, first) = self
            .by_length
            .range((want, 0, 0)..)
            .next()
            .or_else(|| self.by_length.iter().next_back())
            .copied()?;
        let used = length.min(want);
        self.remove_free(chunk, first, length);
        if used < length {
            self.insert_free(chunk, first + used, length - used);
        }
        Some(PhysicalRun {
            chunk,
            first,
            pages: used,
        })
    }

    /// Takes the given free pages (a run returned with [`give`](Self::give) and not taken
    /// since), to undo a `give`.
    pub fn take_exact(&mut self, run: PhysicalRun) {
        let state = self.chunks[run.chunk as usize]
            .as_ref()
            .expect("runs name live chunks");
        let (start, length) = state
            .free
            .range(..=run.first)
            .next_back()
            .map(|(&s, &l)| (s, l))
            .filter(|&(s, l)| s + l >= run.first + run.pages)
            .expect("the run is free");
        self.remove_free(run.chunk, start, length);
        if start < run.first {
            self.insert_free(run.chunk, start, run.first - start);
        }
        let end = start + length;
        if run.first + run.pages < end {
            self.insert_free(
                run.chunk,
                run.first + run.pages,
                end - run.first - run.pages,
            );
        }
    }

    /// Returns a run taken before, merging it with free neighbours.
    pub fn give(&mut self, run: PhysicalRun) {
        let PhysicalRun {
            chunk,
            mut first,
            mut pages,
        } = run;
        let state = self.chunks[chunk as usize]
            .as_ref()
            .expect("runs name live chunks");
        let before = state
            .free
            .range(..first)
            .next_back()
            .map(|(&s, &l)| (s, l))
            .filter(|&(s, l)| s + l == first);
        let after = state
            .free
            .get(&(first + pages))
            .map(|&l| (first + pages, l));
        if let Some((s, l)) = before {
            self.remove_free(chunk, s, l);
            first = s;
            pages += l;
        }
        if let Some((s, l)) = after {
            self.remove_free(chunk, s, l);
            pages += l;
        }
        self.insert_free(chunk, first, pages);
    }

    /// Pages of chunk `chunk` that are taken (bound somewhere).
    pub fn taken_pages(&self, chunk: u32) -> u64 {
        self.chunks[chunk as usize]
            .as_ref()
            .map_or(0, |c| u64::from(c.pages - c.free_pages))
    }

    /// Whether some chunk has between 1 and `pages` pages taken.
    pub fn some_taken_at_most(&self, pages: u64) -> bool {
        self.chunks.iter().flatten().any(|c| {
            let taken = u64::from(c.pages - c.free_pages);
            taken > 0 && taken <= pages
        })
    }

    /// Whether some chunk has no page taken.
    pub fn has_idle(&self) -> bool {
        self.chunks
            .iter()
            .flatten()
            .any(|c| c.free_pages == c.pages)
    }

    /// Frees chunks none of whose pages are taken, largest first, each only if it fits in
    /// what is left of `bytes`; returns the bytes freed (at most `bytes`).
    pub fn release_idle(&mut self, sparse: &SparseDevice, bytes: u64) -> u64 {
        let mut idle: Vec<(u32, usize)> = self
            .chunks
            .iter()
            .enumerate()
            .filter_map(|(index, chunk)| match chunk {
                Some(c) if c.free_pages == c.pages => Some((c.pages, index)),
                _ => None,
            })
            .collect();
        idle.sort_unstable_by(|a, b| b.cmp(a));
        let mut freed = 0;
        for (pages, index) in idle {
            let size = pages as u64 * self.page;
            if freed + size > bytes {
                continue;
            }
            let chunk = self.chunks[index].take().expect("listed as idle");
            self.by_length.remove(&(chunk.pages, index as u32, 0));
            self.free_pages -= chunk.pages as u64;
            self.device_bytes -= size;
            let start = Instant::now();
            // SAFETY: no page of the chunk is bound (every page is free), so no range and
            // no GPU work uses the memory.
            unsafe { sparse.free_chunk(chunk.memory) };
            self.counters.time += start.elapsed();
            self.counters.frees += 1;
            freed += size;
        }
        while matches!(self.chunks.last(), Some(None)) {
            self.chunks.pop();
        }
        freed
    }

    /// Frees the reserve: drops orders not started, waits for an allocation in flight, and
    /// frees every chunk allocated ahead; returns the bytes freed. The reserve is filled
    /// again only after the next chunk a map needs, and a reserve stopped by a failed
    /// allocation starts again then.
    pub fn release_reserve(&mut self) -> u64 {
        let (bytes, frees, time) = self.reserve.release();
        self.counters.frees += frees;
        self.counters.time += time;
        bytes
    }

    /// Frees every chunk, bound or not, and the reserve, after stopping its thread. Only
    /// for teardown, once no GPU work uses them.
    pub fn free_all(&mut self, sparse: &SparseDevice) {
        self.reserve.shutdown();
        for chunk in self.chunks.drain(..).flatten() {
            // SAFETY: the caller waited for the GPU; ranges still bound to the memory are
            // destroyed and never used again.
            unsafe { sparse.free_chunk(chunk.memory) };
        }
        self.by_length.clear();
        self.free_pages = 0;
        self.device_bytes = 0;
    }

    /// Adds chunks for `shortfall` bytes: chunks of the reserve first, then one allocated
    /// here for what they do not cover. Bytes in
    /// chunks and in the reserve stay within `limit`: a shortfall that the reserve and the
    /// room under the limit cannot cover fails before anything changes.
    fn grow(
        &mut self,
        sparse: &SparseDevice,
        shortfall: u64,
        limit: Option<u64>,
    ) -> Result<(), SparseError> {
        let mut needed = shortfall.div_ceil(self.page) * self.page;
        let held = self.reserve.held();
        let room = limit.map_or(u64::MAX, |l| l.saturating_sub(self.device_bytes + held));
        if needed > room.saturating_add(held) {
            return Err(SparseError::OutOfMemory {
                bytes: needed,
                result: vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            });
        }
        if held > 0 {
            let (taken, waited) = self.reserve.take(needed);
            self.counters.time += waited;
            if !waited.is_zero() {
                self.counters.reserve_waits += 1;
            }
            for chunk in taken {
                needed = needed.saturating_sub(chunk.bytes);
                self.counters.reserve_taken += 1;
                self.adopt(chunk.memory, chunk.bytes);
            }
        }
        if needed > 0 {
            self.allocate_for(sparse, needed, limit)?;
        }
        Ok(())
    }

    /// Allocates a chunk for `needed` bytes on the caller's thread: the policy's size, at
    /// most what `limit` leaves, or `needed` alone where the driver refuses more.
    fn allocate_for(
        &mut self,
        sparse: &SparseDevice,
        needed: u64,
        limit: Option<u64>,
    ) -> Result<(), SparseError> {
        let in_use = self.device_bytes();
        let room = limit.map_or(u64::MAX, |l| l.saturating_sub(in_use));
        if needed > room {
            return Err(SparseError::OutOfMemory {
                bytes: needed,
                result: vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            });
        }
        let preferred = self
            .policy
            .chunk_for(needed, self.device_bytes, self.device_memory, self.page)
            .min(room)
            .min(self.largest_chunk())
            .max(needed);
        let memory = match self.allocate(sparse, preferred) {
            Ok(memory) => (memory, preferred),
            Err(_) if preferred > needed => (self.allocate(sparse, needed)?, needed),
            Err(error) => return Err(error),
        };
        let (memory, size) = memory;
        self.adopt(memory, size);
        Ok(())
    }

    /// After a map that grew: orders chunks until the free pages and the reserve together
    /// hold a preferred chunk ([`ChunkPolicy::chunk_size`], what the pool may leave unused
    /// anyway) plus `reserve_chunks` times the preferred chunk without the device's floor
    /// (at most 1/`divisor` of the memory in chunks, or `min_chunk`), so that the reserve
    /// holds at most that much beyond the bound [`ChunkPolicy`] guarantees without one,
    /// also for a small pool on a large device. Each chunk is at most a preferred chunk and
    /// a whole number of granules; none is ordered beyond `limit` or once the reserve is
    /// stopped by a failure.
    fn refill(&mut self, sparse: &SparseDevice, limit: Option<u64>) {
        if self.reserve_chunks == 0 {
            return;
        }
        let preferred = self
            .policy
            .chunk_size(self.device_bytes, self.device_memory, self.page);
        let extra = self.policy.chunk_size(self.device_bytes, 0, self.page);
        let target = preferred.saturating_add(extra.saturating_mul(u64::from(self.reserve_chunks)));
        loop {
            let held = self.reserve.held();
            let idle = self.free_bytes() + held;
            let size = self.policy.round_down(
                target
                    .saturating_sub(idle)
                    .min(preferred)
                    .min(self.largest_chunk()),
                self.page,
            );
            let total = self.device_bytes + held + size;
            if size == 0 || limit.is_some_and(|l| total > l) || !self.reserve.order(sparse, size) {
                break;
            }
            self.device_bytes_peak = self.device_bytes_peak.max(total);
        }
    }

    /// The largest chunk whose pages a run can count (`u32::MAX` pages): policies with
    /// larger preferred chunks get this instead.
    fn largest_chunk(&self) -> u64 {
        u64::from(u32::MAX) * self.page
    }

    /// Makes `memory` of `size` bytes a chunk of free pages.
    fn adopt(&mut self, memory: vk::DeviceMemory, size: u64) {
        let pages = (size / self.page) as u32;
        let index = match self.chunks.iter().position(Option::is_none) {
            Some(index) => index,
            None => {
                self.chunks.push(None);
                self.chunks.len() - 1
            }
        };
        self.chunks[index] = Some(Chunk {
            memory,
            pages,
            free: BTreeMap::new(),
            free_pages: 0,
        });
        self.device_bytes += size;
        let total = self.device_bytes();
        self.device_bytes_peak = self.device_bytes_peak.max(total);
        self.insert_free(index as u32, 0, pages);
    }

    fn allocate(
        &mut self,
        sparse: &SparseDevice,
        bytes: u64,
    ) -> Result<vk::DeviceMemory, SparseError> {
        let start = Instant::now();
        let result = sparse.allocate_chunk(bytes);
        self.counters.time += start.elapsed();
        match result {
            Ok(memory) => {
                self.counters.allocations += 1;
                Ok(memory)
            }
            Err(result) => Err(SparseError::OutOfMemory { bytes, result }),
        }
    }

    fn insert_free(&mut self, chunk: u32, first: u32, pages: u32) {
        let state = self.chunks[chunk as usize].as_mut().expect("live chunk");
        state.free.insert(first, pages);
        state.free_pages += pages;
        self.free_pages += pages as u64;
        self.by_length.insert((pages, chunk, first));
    }

    fn remove_free(&mut self, chunk: u32, first: u32, pages: u32) {
        let state = self.chunks[chunk as usize].as_mut().expect("live chunk");
        state.free.remove(&first);
        state.free_pages -= pages;
        self.free_pages -= pages as u64;
        self.by_length.remove(&(pages, chunk, first));
    }
}

#[cfg(test)]
mod tests {
    use super::ChunkPolicy;

    const MIB: u64 = 1 << 20;
    const PAGE: u64 = 64 << 10;

    #[test]
    fn the_preferred_chunk_grows_with_the_memory_in_chunks_within_its_bounds() {
        let policy = ChunkPolicy::default();
        let small = 1 << 30; // a floor of 0.5 MiB: under the smallest chunk
        assert_eq!(policy.chunk_size(0, small, PAGE), 2 * MIB);
        assert_eq!(policy.chunk_size(255 * MIB, small, PAGE), 2 * MIB);
        // 1000 MiB / 128 = 7.8 MiB, rounded down to a power of two.
        assert_eq!(policy.chunk_size(1000 * MIB, small, PAGE), 4 * MIB);
        assert_eq!(policy.chunk_size(1 << 40, small, PAGE), 256 * MIB);
        // An H200's 139.8 GiB: a floor of 69.9 MiB, in 2 MiB granules.
        let h200 = 150_109_880_320;
        assert_eq!(policy.chunk_size(0, h200, PAGE), 70 * MIB);
        assert_eq!(policy.chunk_size(16 << 30, h200, PAGE), 128 * MIB);
        let no_floor = policy.with_device_divisor(0);
        assert_eq!(no_floor.chunk_size(0, h200, PAGE), 2 * MIB);
    }

    #[test]
    fn chunks_are_whole_granules_and_whole_pages() {
        let policy = ChunkPolicy::default();
        // A shortfall of 3 MiB and a page, 4 GiB in chunks (preferred 32 MiB): 32 MiB.
        assert_eq!(policy.chunk_for(3 * MIB + PAGE, 4 << 30, 0, PAGE), 32 * MIB);
        // 40 MiB and a page, plus 32 MiB spare, rounded up to 2 MiB.
        assert_eq!(
            policy.chunk_for(40 * MIB + PAGE, 4 << 30, 0, PAGE),
            74 * MIB
        );
        let exact = policy.with_spare_on_large(false);
        assert_eq!(exact.chunk_for(40 * MIB + PAGE, 4 << 30, 0, PAGE), 42 * MIB);
        // A granule smaller than the page rounds to the page; one that is not a multiple of
        // the page is rounded up to one.
        let fine = exact.with_granule(1);
        assert_eq!(
            fine.chunk_for(40 * MIB + 1, 4 << 30, 0, PAGE),
            40 * MIB + PAGE
        );
        let odd = exact.with_granule(100 << 10);
        assert_eq!(
            odd.chunk_for(40 * MIB + 1, 4 << 30, 0, PAGE),
            40 * MIB + (128 << 10)
        );
    }

    #[test]
    fn the_unbound_remainder_stays_under_a_preferred_chunk_and_a_granule() {
        let policy = ChunkPolicy::default();
        let mut in_chunks = 0u64;
        let mut free = 0u64;
        // Maps of every size from a page to 1 GiB, in a fixed scramble.
        let mut size = PAGE;
        for i in 0..2000u64 {
            size = (size * 7 + i * PAGE) % (1 << 30) / PAGE * PAGE + PAGE;
            if size > free {
                let preferred = policy.chunk_size(in_chunks, 8 << 30, PAGE);
                let chunk = policy.chunk_for(size - free, in_chunks, 8 << 30, PAGE);
                assert!(chunk >= size - free);
                assert_eq!(chunk % (2 * MIB), 0);
                in_chunks += chunk;
                free += chunk;
                assert!(free - size < preferred + 2 * MIB, "map {i}");
            }
            free -= size;
        }
    }
}
