//! Physical memory: `VkDeviceMemory` chunks, each cut into pages that are bound into ranges.
//!
//! A chunk is allocated when a map needs more pages than the free ones, and freed only when
//! none of its pages is bound. Allocating is costly per call (0.18 ms for 2 MiB, 5.4 ms for
//! 256 MiB on an H200) and freeing more so (3.3 ms for 2 MiB), so chunks grow with the
//! memory already in chunks: a new chunk is about 1/128 of it, which keeps the memory in
//! chunks but not in pages under 1% of the total while taking few allocations.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ash::vk;

use super::device::SparseDevice;
use super::error::SparseError;

/// How large new chunks are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChunkPolicy {
    /// The smallest chunk, in bytes (rounded up to whole pages).
    pub min_chunk: u64,
    /// The largest chunk grown by the ratio (a single map larger than this still gets one
    /// chunk of its size).
    pub max_chunk: u64,
    /// A new chunk is the memory in chunks so far divided by this, rounded down to a power of
    /// two, within `min_chunk..=max_chunk`.
    pub divisor: u64,
}

impl Default for ChunkPolicy {
    fn default() -> Self {
        ChunkPolicy {
            min_chunk: 2 << 20,
            max_chunk: 256 << 20,
            divisor: 128,
        }
    }
}

impl ChunkPolicy {
    /// Sets the smallest chunk.
    pub fn with_min_chunk(mut self, bytes: u64) -> Self {
        self.min_chunk = bytes;
        self
    }

    /// Sets the largest chunk grown by the ratio.
    pub fn with_max_chunk(mut self, bytes: u64) -> Self {
        self.max_chunk = bytes;
        self
    }

    /// Sets the ratio of memory in chunks to a new chunk.
    pub fn with_divisor(mut self, divisor: u64) -> Self {
        self.divisor = divisor.max(1);
        self
    }

    /// The size of the next chunk when `in_chunks` bytes are in chunks and `page` is the
    /// page.
    pub fn chunk_size(&self, in_chunks: u64, page: u64) -> u64 {
        let grown = in_chunks / self.divisor;
        let grown = if grown == 0 {
            0
        } else {
            1u64 << (63 - grown.leading_zeros())
        };
        let size = grown.clamp(self.min_chunk, self.max_chunk.max(self.min_chunk));
        size.div_ceil(page) * page
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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChunkCounters {
    /// `vkAllocateMemory` calls that succeeded.
    pub allocations: u64,
    /// `vkFreeMemory` calls.
    pub frees: u64,
    /// Time in `vkAllocateMemory` and `vkFreeMemory`, failed calls included.
    pub time: Duration,
}

/// Every chunk of one pool, and its free pages.
pub(crate) struct Chunks {
    page: u64,
    policy: ChunkPolicy,
    chunks: Vec<Option<Chunk>>,
    /// Free runs of every chunk ordered by (length, chunk, first): best fit first.
    by_length: BTreeSet<(u32, u32, u32)>,
    free_pages: u64,
    device_bytes: u64,
    device_bytes_peak: u64,
    pub counters: ChunkCounters,
}

impl Chunks {
    pub fn new(page: u64, policy: ChunkPolicy) -> Chunks {
        Chunks {
            page,
            policy,
            chunks: Vec::new(),
            by_length: BTreeSet::new(),
            free_pages: 0,
            device_bytes: 0,
            device_bytes_peak: 0,
            counters: ChunkCounters::default(),
        }
    }

    /// Bytes in chunks (device memory this pool holds).
    pub fn device_bytes(&self) -> u64 {
        self.device_bytes
    }

    /// The peak of [`device_bytes`](Self::device_bytes).
    pub fn device_bytes_peak(&self) -> u64 {
        self.device_bytes_peak
    }

    /// Bytes of chunk pages not bound anywhere.
    pub fn free_bytes(&self) -> u64 {
        self.free_pages * self.page
    }

    /// Number of live chunks.
    pub fn count(&self) -> usize {
        self.chunks.iter().flatten().count()
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
        if pages > self.free_pages {
            self.grow(sparse, (pages - self.free_pages) * self.page, limit)?;
        }
        let mut runs = Vec::new();
        let mut left = pages;
        while left > 0 {
            let want = left.min(u32::MAX as u64) as u32;
            // Best fit: the shortest free run that holds all that is left, else the longest.
            let pick = self
                .by_length
                .range((want, 0, 0)..)
                .next()
                .or_else(|| self.by_length.iter().next_back())
                .copied()
                .expect("enough free pages were ensured");
            let (length, chunk, first) = pick;
            let used = length.min(want);
            self.remove_free(chunk, first, length);
            if used < length {
                self.insert_free(chunk, first + used, length - used);
            }
            runs.push(PhysicalRun {
                chunk,
                first,
                pages: used,
            });
            left -= used as u64;
        }
        Ok(runs)
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
            unsafe { sparse.raw().free_memory(chunk.memory, None) };
            self.counters.time += start.elapsed();
            self.counters.frees += 1;
            freed += size;
        }
        while matches!(self.chunks.last(), Some(None)) {
            self.chunks.pop();
        }
        freed
    }

    /// Frees every chunk, bound or not. Only for teardown, once no GPU work uses them.
    pub fn free_all(&mut self, sparse: &SparseDevice) {
        for chunk in self.chunks.drain(..).flatten() {
            // SAFETY: the caller waited for the GPU; ranges still bound to the memory are
            // destroyed and never used again.
            unsafe { sparse.raw().free_memory(chunk.memory, None) };
        }
        self.by_length.clear();
        self.free_pages = 0;
        self.device_bytes = 0;
    }

    fn grow(
        &mut self,
        sparse: &SparseDevice,
        shortfall: u64,
        limit: Option<u64>,
    ) -> Result<(), SparseError> {
        let needed = shortfall.div_ceil(self.page) * self.page;
        let room = limit.map_or(u64::MAX, |l| l.saturating_sub(self.device_bytes));
        if needed > room {
            return Err(SparseError::OutOfMemory {
                bytes: needed,
                result: vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            });
        }
        let preferred = self
            .policy
            .chunk_size(self.device_bytes, self.page)
            .max(needed)
            .min(room);
        let memory = match self.allocate(sparse, preferred) {
            Ok(memory) => (memory, preferred),
            Err(_) if preferred > needed => (self.allocate(sparse, needed)?, needed),
            Err(error) => return Err(error),
        };
        let (memory, size) = memory;
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
        self.device_bytes_peak = self.device_bytes_peak.max(self.device_bytes);
        self.insert_free(index as u32, 0, pages);
        Ok(())
    }

    fn allocate(
        &mut self,
        sparse: &SparseDevice,
        bytes: u64,
    ) -> Result<vk::DeviceMemory, SparseError> {
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(bytes)
            .memory_type_index(sparse.facts().memory_type);
        let start = Instant::now();
        // SAFETY: a plain allocation of a memory type of this device.
        let result = unsafe { sparse.raw().allocate_memory(&info, None) };
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
