//! A model of where the CUDA driver puts the memory `cudaMalloc` returns.
//!
//! PyTorch's caching allocator breaks ties between free blocks of equal size by device
//! address, so which cached block a request reuses depends on where the driver placed each
//! segment. [`CudaAddressModel`] reproduces the driver's choices as measured on an NVIDIA H200
//! (driver 580, CUDA 13, PyTorch 2.11; docs/POLICY.md, "Segment addresses in plain replay"):
//! on all 70 native oracle pairs it gives every segment PyTorch's address, up to one constant
//! offset per process.
//!
//! The driver's rules, as the model implements them:
//!
//! - **Chunks.** Address space is reserved in *chunks*: a request of `size` bytes (rounded up
//!   to [`GRANULE`](CudaAddressModel::GRANULE), 2 MiB) that fits in no free piece of an
//!   existing chunk gets a new chunk of `size` rounded up to
//!   [`CHUNK`](CudaAddressModel::CHUNK), 32 MiB, and sits at its start; the rest of the chunk
//!   is a free piece for later requests.
//! - **Reuse inside chunks.** A request takes a free piece of the *newest* chunk that has one
//!   large enough; inside that chunk the smallest piece that fits (best fit, then the lowest
//!   address), from its start.
//! - **New chunks, top down.** A new chunk goes at the top of the highest free stretch of
//!   address space that is *larger* than the chunk (a stretch of exactly its size is left
//!   alone). Fresh address space lies below everything reserved so far, so chunks grow
//!   downwards.
//! - **Release.** `cudaFree` returns the piece to its chunk; a chunk with nothing left in it
//!   is released and its address space can hold later chunks.
//! - **The process's own reservations.** Before the first `cudaMalloc`, the CUDA context
//!   holds 512 MiB below the first chunk with two free pieces in it (24 MiB and 2 MiB);
//!   creating a stream reserves 32 MiB more where a new 32 MiB chunk would go (or, depending
//!   on where the process's address space starts, 32 MiB lower; only the order of addresses
//!   matters to the allocator, and both give the same order on every recorded trace).
//!
//! Only the order of addresses matters to the allocator, and the model's addresses are the
//! driver's up to one offset; they start at [`ANCHOR`](CudaAddressModel::ANCHOR).
//!
//! The rules hold for a process whose device memory comes only from the allocator, as in
//! `tools/oracle/replay_torch.py`. In a real training run the driver also reserves address
//! space for kernels and libraries as they load, between the allocator's requests, and the
//! addresses part from the model's.

use std::collections::{BTreeMap, HashMap};

const MIB: u64 = 1 << 20;

/// A chunk of reserved address space, or part of the context's own reservation.
#[derive(Debug, Clone)]
struct Chunk {
    base: u64,
    size: u64,
    /// When it was reserved (a counter): the newest chunk is searched first.
    born: u64,
    /// Free pieces (start, end), in address order, none touching another.
    free: Vec<(u64, u64)>,
    /// Allocations in it.
    live: u32,
    /// Kept by the CUDA context or a stream: never released.
    permanent: bool,
}

/// An entry of [`CudaAddressModel`]'s age order.
#[derive(Debug, Clone, Copy)]
struct Aged {
    born: u64,
    /// The chunk's largest free piece (0: none).
    largest: u64,
    index: usize,
}

impl Chunk {
    /// Takes `size` bytes from the start of the smallest free piece that holds them (the
    /// lowest of equal ones); returns their address.
    fn take_best_fit(&mut self, size: u64) -> Option<u64> {
        let (position, &(start, end)) = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, (start, end))| end - start >= size)
            .min_by_key(|(_, (start, end))| (end - start, *start))?;
        if start + size < end {
            self.free[position].0 = start + size;
        } else {
            self.free.remove(position);
        }
        Some(start)
    }

    /// Returns `start..end` to the free pieces, joining it with the pieces it touches.
    fn give_back(&mut self, start: u64, end: u64) {
        let position = self.free.partition_point(|&(s, _)| s < start);
        let joins_before = position > 0 && self.free[position - 1].1 == start;
        let joins_after = self.free.get(position).is_some_and(|&(s, _)| s == end);
        match (joins_before, joins_after) {
            (true, true) => {
                self.free[position - 1].1 = self.free[position].1;
                self.free.remove(position);
            }
            (true, false) => self.free[position - 1].1 = end,
            (false, true) => self.free[position].0 = start,
            (false, false) => self.free.insert(position, (start, end)),
        }
    }

    fn largest_piece(&self) -> u64 {
        self.free.iter().map(|(s, e)| e - s).max().unwrap_or(0)
    }
}

/// Where the CUDA driver would put each `cudaMalloc` of a process, given the process's
/// sequence of `cudaMalloc`, `cudaFree` and stream creations (module documentation: the
/// rules).
///
/// ```
/// use wgpool::trace::CudaAddressModel;
/// const MIB: u64 = 1 << 20;
/// let mut driver = CudaAddressModel::new();
/// // 24 MiB fills the context's larger free piece; 64 MiB gets a new chunk below the
/// // context, 20 MiB a 32 MiB chunk below that, and the next 2 MiB that chunk's tail.
/// let first = driver.allocate(24 * MIB).unwrap();
/// let large = driver.allocate(64 * MIB).unwrap();
/// let medium = driver.allocate(20 * MIB).unwrap();
/// assert!(large < first && medium == large - 32 * MIB);
/// assert_eq!(driver.allocate(2 * MIB), Some(medium + 20 * MIB));
/// assert!(driver.free(large));
/// ```
#[derive(Debug, Clone)]
pub struct CudaAddressModel {
    /// Chunks, live or vacant (`None`), by index.
    chunks: Vec<Option<Chunk>>,
    /// Indices of vacant entries of `chunks`.
    vacant: Vec<usize>,
    /// Free stretches of address space between reservations: top -> bottom.
    gaps: BTreeMap<u64, u64>,
    /// The lowest reserved address: everything below it is free.
    lowest: u64,
    /// Chunks that can hold allocations, oldest first, with their largest free piece.
    by_age: Vec<Aged>,
    /// Live allocations: address -> (size rounded, chunk index).
    allocations: HashMap<u64, (u64, usize)>,
    clock: u64,
}

impl Default for CudaAddressModel {
    fn default() -> Self {
        Self::new()
    }
}

impl CudaAddressModel {
    /// The driver's allocation granularity: sizes are rounded up to it.
    pub const GRANULE: u64 = 2 * MIB;
    /// The unit in which the driver reserves address space for new chunks.
    pub const CHUNK: u64 = 32 * MIB;
    /// The first allocation's chunk in the CUDA context: the context's reservation is
    /// `ANCHOR - 384 MiB .. ANCHOR + 128 MiB`, and new chunks go below it. (CUDA's own
    /// addresses lie near 0x7f00_0000_0000 too, shifted per process.)
    pub const ANCHOR: u64 = 0x7f00_0000_0000;
    /// The model never reserves below this address; [`allocate`](Self::allocate) answers
    /// `None` when it would have to.
    pub const FLOOR: u64 = 1 << 32;

    /// A fresh process: only the CUDA context's reservation exists.
    pub fn new() -> Self {
        let c = Self::ANCHOR;
        let mut model = CudaAddressModel {
            chunks: Vec::new(),
            vacant: Vec::new(),
            gaps: BTreeMap::new(),
            lowest: c - 384 * MIB,
            by_age: Vec::new(),
            allocations: HashMap::new(),
            clock: 0,
        };
        // The context holds [C - 384 MiB, C + 128 MiB) with no gap; two of its 32 MiB chunks
        // have free pieces, the one at C + 96 MiB older than the one at C.
        model.reserve(c - 384 * MIB, 384 * MIB, 384 * MIB, true);
        model.reserve(c + 32 * MIB, 64 * MIB, 64 * MIB, true);
        model.reserve(c + 96 * MIB, 32 * MIB, 8 * MIB, true);
        model.reserve(c, 32 * MIB, 30 * MIB, true);
        model
    }

    /// Reserves `size` bytes at `base`, of which the first `used` are taken (by an
    /// allocation, or for good when `permanent`); returns the chunk's index.
    fn reserve(&mut self, base: u64, size: u64, used: u64, permanent: bool) -> usize {
        self.clock += 1;
        let born = self.clock;
        let mut free = Vec::new();
        if used < size {
            free.push((base + used, base + size));
        }
        let chunk = Chunk {
            base,
            size,
            born,
            free,
            live: u32::from(!permanent),
            permanent,
        };
        let index = match self.vacant.pop() {
            Some(index) => {
                self.chunks[index] = Some(chunk);
                index
            }
            None => {
                self.chunks.push(Some(chunk));
                self.chunks.len() - 1
            }
        };
        if !permanent || used < size {
            self.by_age.push(Aged {
                born,
                largest: size - used,
                index,
            });
        }
        index
    }

    /// Marks `base..end`, free until now, as reserved.
    fn take_space(&mut self, base: u64, end: u64) {
        match self.gaps.range(end..).next() {
            Some((&top, &bottom)) if bottom <= base => {
                self.gaps.remove(&top);
                if bottom < base {
                    self.gaps.insert(base, bottom);
                }
                if end < top {
                    self.gaps.insert(top, end);
                }
            }
            _ => {
                debug_assert!(end <= self.lowest, "space below the lowest reservation");
                if end < self.lowest {
                    self.gaps.insert(self.lowest, end);
                }
                self.lowest = base;
            }
        }
    }

    /// Marks `base..end`, reserved until now, as free.
    fn give_space(&mut self, base: u64, end: u64) {
        let mut bottom = base;
        let mut top = end;
        if let Some(below) = self.gaps.remove(&base) {
            bottom = below;
        }
        if let Some((&above, &above_bottom)) = self.gaps.range(end + 1..).next()
            && above_bottom == end
        {
            self.gaps.remove(&above);
            top = above;
        }
        if bottom == self.lowest {
            self.lowest = top;
        } else {
            self.gaps.insert(top, bottom);
        }
    }

    fn chunk(&mut self, index: usize) -> &mut Chunk {
        self.chunks[index]
            .as_mut()
            .expect("indexed chunks are live")
    }

    /// The base for a new reservation of `size` bytes: the top of the highest free stretch
    /// larger than `size`, or `None` when there is none above [`FLOOR`](Self::FLOOR).
    fn place(&self, size: u64) -> Option<u64> {
        if let Some((&top, _)) = self
            .gaps
            .iter()
            .rev()
            .find(|&(&top, &bottom)| top - bottom > size)
        {
            return Some(top - size);
        }
        (self.lowest.saturating_sub(Self::FLOOR) > size).then(|| self.lowest - size)
    }

    /// `cudaMalloc(size)`: the address the driver would return, or `None` if the model has
    /// no address space left (above [`FLOOR`](Self::FLOOR)).
    pub fn allocate(&mut self, size: u64) -> Option<u64> {
        let size = size.max(1).div_ceil(Self::GRANULE) * Self::GRANULE;
        let newest_fit = self.by_age.iter().rposition(|aged| aged.largest >= size);
        let (address, index) = match newest_fit {
            Some(position) => {
                let index = self.by_age[position].index;
                let chunk = self.chunk(index);
                let start = chunk.take_best_fit(size).expect("its largest piece fits");
                chunk.live += 1;
                self.by_age[position].largest = chunk.largest_piece();
                (start, index)
            }
            None => {
                let chunk_size = size.div_ceil(Self::CHUNK) * Self::CHUNK;
                let base = self.place(chunk_size)?;
                self.take_space(base, base + chunk_size);
                (base, self.reserve(base, chunk_size, size, false))
            }
        };
        self.allocations.insert(address, (size, index));
        Some(address)
    }

    /// `cudaFree(address)`; false (and nothing changes) if `address` is not a live
    /// allocation of this model.
    pub fn free(&mut self, address: u64) -> bool {
        let Some((size, index)) = self.allocations.remove(&address) else {
            return false;
        };
        let chunk = self.chunk(index);
        chunk.give_back(address, address + size);
        chunk.live -= 1;
        let released = chunk.live == 0 && !chunk.permanent;
        let (base, size, born) = (chunk.base, chunk.size, chunk.born);
        let chunk_largest = chunk.largest_piece();
        let position = self
            .by_age
            .binary_search_by_key(&born, |aged| aged.born)
            .expect("a chunk with allocations is aged");
        if released {
            self.chunks[index] = None;
            self.vacant.push(index);
            self.by_age.remove(position);
            self.give_space(base, base + size);
        } else {
            self.by_age[position].largest = chunk_largest;
        }
        true
    }

    /// A stream was created (`cudaStreamCreate`): the driver reserves 32 MiB for it, where
    /// a new 32 MiB chunk would go.
    pub fn create_stream(&mut self) {
        if let Some(base) = self.place(Self::CHUNK) {
            self.take_space(base, base + Self::CHUNK);
            self.reserve(base, Self::CHUNK, Self::CHUNK, true);
        }
    }

    /// Live allocations.
    pub fn live_allocations(&self) -> usize {
        self.allocations.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A released chunk's space holds later chunks from its top, but only while the stretch
    /// is larger than the new chunk; a 2 MiB request takes the newest chunk's smallest piece.
    #[test]
    fn released_space_is_reused_top_down_and_pieces_best_fit() {
        let mut driver = CudaAddressModel::new();
        // Fill the context's free pieces first.
        let context = [driver.allocate(24 * MIB), driver.allocate(2 * MIB)];
        assert_eq!(context[1].unwrap(), context[0].unwrap() - 74 * MIB);
        let a = driver.allocate(128 * MIB).unwrap();
        assert_eq!(a, context[1].unwrap() - 30 * MIB - 512 * MIB);
        let b = driver.allocate(32 * MIB).unwrap();
        assert_eq!(b, a - 32 * MIB);
        assert!(driver.free(a));
        // The 128 MiB stretch takes a 64 MiB chunk at its top, then a 32 MiB one below it;
        // the 32 MiB left is not larger than a 32 MiB chunk: the next goes below `b`.
        let c = driver.allocate(64 * MIB).unwrap();
        assert_eq!(c, a + 64 * MIB);
        let d = driver.allocate(20 * MIB).unwrap();
        assert_eq!(d, a + 32 * MIB);
        let e = driver.allocate(30 * MIB).unwrap();
        assert_eq!(e, b - 32 * MIB);
        // Newest chunk first: `e`'s 2 MiB tail, although `d`'s 12 MiB tail is older.
        assert_eq!(driver.allocate(2 * MIB), Some(e + 30 * MIB));
        assert_eq!(driver.allocate(2 * MIB), Some(d + 20 * MIB));
        assert!(!driver.free(a), "freed twice");
        assert_eq!(driver.live_allocations(), 8);
    }
}
