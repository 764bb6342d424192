//! Downloads into user slices: chunked DMA into cached download buffers, pipelined with
//! multi-threaded copies out, and the [`DownloadTicket`] of a non-blocking download.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use super::error::StagingError;
use super::flight::{AfterMap, Flight};
use super::host_buffer::{HostBuffer, Kind};
use super::size_class::chunks;
use super::staging_shared::StagingShared;
use crate::pool::Block;

/// One chunk copied from a block into a download buffer, with its map pending or done.
///
/// The chunk holds its buffer until [`finish`](ReadChunk::finish) has copied the bytes out
/// and unmapped it; dropped earlier, it hands the buffer to its flight, which unmaps and
/// caches it once the GPU is done.
struct ReadChunk {
    shared: Arc<StagingShared>,
    staging: Option<HostBuffer>,
    flight: Arc<Flight>,
    /// Bytes wanted.
    len: usize,
    /// Bytes copied and mapped: `len` rounded up to 4.
    padded: u64,
}

impl ReadChunk {
    /// Submits the copy of `block[at..at + len]` into a download buffer of `class`, and maps
    /// it once the copy is done.
    fn submit(
        shared: &Arc<StagingShared>,
        block: &Block,
        at: u64,
        len: usize,
        class: u64,
    ) -> Result<ReadChunk, StagingError> {
        let padded = (len as u64).div_ceil(4) * 4;
        // The caller bounds its own window, so the cache never needs to wait here.
        let staging = shared.acquire(Kind::Download, class, &mut VecDeque::new())?;
        let index = shared.submit_copy(|encoder| {
            encoder.copy_buffer_to_buffer(
                block.place().0,
                block.place().1 + at,
                staging.buffer(),
                0,
                padded,
            );
        })?;
        let buffer = staging.buffer().clone();
        let flight = Flight::start(
            shared,
            &buffer,
            wgpu::MapMode::Read,
            0..padded,
            Some(index),
            None,
        );
        Ok(ReadChunk {
            shared: shared.clone(),
            staging: Some(staging),
            flight,
            len,
            padded,
        })
    }

    /// Waits for the chunk, copies its bytes into `dst` (of exactly `len` bytes), and returns
    /// the buffer to the cache.
    fn finish(mut self, dst: &mut [u8]) -> Result<(), StagingError> {
        debug_assert_eq!(dst.len(), self.len);
        self.flight.wait()?;
        let Some(staging) = self.staging.take() else {
            return Err(StagingError::Map("the chunk was finished twice".into()));
        };
        let copied = staging
            .buffer()
            .get_mapped_range(0..self.padded)
            .map(|view| self.shared.copies.copy(&view[..self.len], dst))
            .map_err(|e| StagingError::Map(e.to_string()));
        staging.buffer().unmap();
        if copied.is_ok() {
            self.shared.cache.put(staging);
        }
        copied
    }
}

impl Drop for ReadChunk {
    fn drop(&mut self) {
        if let Some(staging) = self.staging.take() {
            self.flight.abandon(
                staging,
                AfterMap::UnmapThenCache,
                &Arc::downgrade(&self.shared),
            );
        }
    }
}

/// A submitted download: the block's bytes as they were after all work submitted before
/// the call, in download staging buffers, arriving while the caller does other work.
///
/// Dropping it without waiting is fine: its staging buffers return to the cache once the GPU
/// is done with them.
#[must_use = "a download ticket holds the data; wait() on it to get it"]
pub struct DownloadTicket {
    chunks: Vec<(ReadChunk, Range<usize>)>,
    len: u64,
}

impl DownloadTicket {
    /// Bytes the download delivers.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the download is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every chunk has arrived on the host. Drives wgpu once, without blocking.
    pub fn is_ready(&self) -> bool {
        self.chunks
            .iter()
            .all(|(chunk, _)| chunk.flight.poll_done())
    }

    /// Blocks until the data is on the host; the bytes.
    pub fn wait(self) -> Result<Vec<u8>, StagingError> {
        let mut out = vec![0u8; self.len as usize];
        self.wait_into(&mut out)?;
        Ok(out)
    }

    /// Blocks until the data is on the host and copies it into `dst`, which must have
    /// exactly [`len`](Self::len) bytes. Chunks are copied out as they arrive.
    pub fn wait_into(self, dst: &mut [u8]) -> Result<(), StagingError> {
        if dst.len() as u64 != self.len {
            return Err(StagingError::LengthMismatch {
                what: "DownloadTicket::wait_into",
                expected: self.len,
                got: dst.len() as u64,
            });
        }
        for (chunk, range) in self.chunks {
            chunk.finish(&mut dst[range])?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for DownloadTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DownloadTicket")
            .field("len", &self.len)
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

/// Checks a download of the first `len` bytes of `block`.
pub(crate) fn check_download(
    what: &'static str,
    device: &wgpu::Device,
    block: &Block,
    len: u64,
) -> Result<(), StagingError> {
    if !block.is_on(device) {
        return Err(StagingError::ForeignDevice { what });
    }
    if len > block.size() {
        return Err(StagingError::BeyondBlock {
            what,
            len,
            size: block.size(),
        });
    }
    let usage = block.place().0.usage();
    if !usage.contains(wgpu::BufferUsages::COPY_SRC) {
        return Err(StagingError::MissingUsage {
            what,
            needed: "COPY_SRC",
            usage,
        });
    }
    Ok(())
}

/// Copies the first `dst.len()` bytes of `block` into `dst`, with at most `max_in_flight`
/// chunks in flight: while the CPU copies chunk k out, the GPU copies the following ones in.
///
/// Chunks beyond the first window are submitted while the call runs, so work another thread
/// submits meanwhile that writes the block may show in them; work submitted before the call
/// always does.
pub(crate) fn download_into(
    shared: &Arc<StagingShared>,
    block: &Block,
    dst: &mut [u8],
) -> Result<(), StagingError> {
    check_download("download_into", &shared.device, block, dst.len() as u64)?;
    shared.counters.downloaded(dst.len() as u64);
    if dst.is_empty() {
        return Ok(());
    }
    let (class, ranges) = chunks(dst.len() as u64, shared.options.chunk_size);
    let mut next = ranges.iter().map(|r| r.start as usize..r.end as usize);
    let mut pending: VecDeque<(ReadChunk, Range<usize>)> = VecDeque::new();
    let submit = |range: Range<usize>| {
        ReadChunk::submit(shared, block, range.start as u64, range.len(), class)
            .map(|chunk| (chunk, range))
    };
    for range in next.by_ref().take(shared.options.max_in_flight) {
        pending.push_back(submit(range)?);
    }
    while let Some((chunk, range)) = pending.pop_front() {
        chunk.finish(&mut dst[range])?;
        if let Some(range) = next.next() {
            pending.push_back(submit(range)?);
        }
    }
    Ok(())
}

/// Submits copies of all of `block`'s `size()` bytes and returns at once.
pub(crate) fn download_async(
    shared: &Arc<StagingShared>,
    block: &Block,
) -> Result<DownloadTicket, StagingError> {
    let len = block.size();
    check_download("download_async", &shared.device, block, len)?;
    shared.counters.downloaded(len);
    let mut out = Vec::new();
    if len > 0 {
        let (class, ranges) = chunks(len, shared.options.chunk_size);
        for range in ranges {
            let range = range.start as usize..range.end as usize;
            let chunk = ReadChunk::submit(shared, block, range.start as u64, range.len(), class)?;
            out.push((chunk, range));
        }
    }
    Ok(DownloadTicket { chunks: out, len })
}
