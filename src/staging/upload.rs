//! Uploads from user slices: chunked, pipelined, multi-threaded copies into cached staging
//! buffers, and the [`UploadTicket`] that says when the GPU has finished with them.

use std::collections::VecDeque;
use std::sync::Arc;

use super::error::StagingError;
use super::flight::{AfterMap, Flight};
use super::host_buffer::Kind;
use super::size_class::chunks;
use super::staging_shared::StagingShared;
use crate::pool::Block;

/// A submitted upload. Dropping it is fine: the staging memory still returns to the cache
/// once the GPU is done with it.
///
/// The data is in queue order from the moment the upload call returned: work submitted
/// after it sees the data, whether or not the ticket was waited on. Waiting says the GPU
/// has finished the copies (and so reports a device failure during them).
#[must_use = "an upload ticket says when the GPU finished the copy; wait() on it or drop it"]
pub struct UploadTicket {
    flights: Vec<Arc<Flight>>,
    len: u64,
}

impl UploadTicket {
    /// Bytes uploaded.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the upload was empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the GPU has finished every copy. Drives wgpu once, without blocking.
    pub fn is_done(&self) -> bool {
        self.flights.iter().all(|flight| flight.poll_done())
    }

    /// Blocks until the GPU has finished every copy of the upload.
    pub fn wait(self) -> Result<(), StagingError> {
        for flight in &self.flights {
            flight.wait()?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for UploadTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadTicket")
            .field("len", &self.len)
            .field("chunks", &self.flights.len())
            .finish()
    }
}

/// Checks an upload of `len` bytes into the start of `block`.
pub(crate) fn check_upload(
    what: &'static str,
    device: &wgpu::Device,
    block: &Block,
    len: u64,
) -> Result<(), StagingError> {
    if !block.is_on(device) {
        return Err(StagingError::ForeignDevice { what });
    }
    if block.is_read_only() {
        return Err(StagingError::ReadOnly { what });
    }
    if len > block.size() {
        return Err(StagingError::TooLong {
            what,
            len,
            destination: "the block",
            capacity: block.size(),
        });
    }
    if len % 4 != 0 && len != block.size() {
        return Err(StagingError::Unaligned {
            what,
            len,
            destination: "the block",
            size: block.size(),
        });
    }
    let usage = block.place().0.usage();
    if !usage.contains(wgpu::BufferUsages::COPY_DST) {
        return Err(StagingError::MissingUsage {
            what,
            needed: "COPY_DST",
            usage,
        });
    }
    Ok(())
}

/// Copies `data` into the start of `block`: chunk by chunk into cached upload buffers (on
/// the copy threads), each chunk submitted as soon as it is written, so the CPU fills chunk
/// k + 1 while the GPU copies chunk k. At most `max_in_flight` chunks of this upload are in
/// flight; a further chunk waits for the oldest to come back.
///
/// Returns once every chunk is submitted.
pub(crate) fn upload(
    shared: &Arc<StagingShared>,
    block: &Block,
    data: &[u8],
) -> Result<UploadTicket, StagingError> {
    check_upload("upload", &shared.device, block, data.len() as u64)?;
    let len = data.len() as u64;
    let mut flights = Vec::new();
    if len > 0 {
        let (class, ranges) = chunks(len, shared.options.chunk_size);
        let mut window = VecDeque::new();
        for range in ranges {
            let piece = &data[range.start as usize..range.end as usize];
            let flight = upload_chunk(shared, block, range.start, piece, class, &mut window)?;
            window.push_back(flight.clone());
            flights.push(flight);
        }
    }
    shared.counters.uploaded(len);
    Ok(UploadTicket { flights, len })
}

fn upload_chunk(
    shared: &Arc<StagingShared>,
    block: &Block,
    at: u64,
    piece: &[u8],
    class: u64,
    window: &mut VecDeque<Arc<Flight>>,
) -> Result<Arc<Flight>, StagingError> {
    let padded = (piece.len() as u64).div_ceil(4) * 4;
    let staging = shared.acquire(Kind::Upload, class, window)?;
    {
        let mut view = staging
            .buffer()
            .get_mapped_range_mut(0..padded)
            .map_err(|e| StagingError::Map(e.to_string()))?;
        let (mut body, mut pad) = view.slice(..).split_at(piece.len());
        shared.copies.copy_to_write_only(piece, &mut body);
        // The pad lands in the block's own capacity past its size (check_upload allows a
        // length that is not a multiple of 4 only when it reaches the block's end).
        pad.fill(0);
    }
    staging.buffer().unmap();
    let index = shared.submit_copy(|encoder| {
        encoder.copy_buffer_to_buffer(
            staging.buffer(),
            0,
            block.place().0,
            block.place().1 + at,
            padded,
        );
    })?;
    let buffer = staging.buffer().clone();
    Ok(Flight::start(
        shared,
        &buffer,
        wgpu::MapMode::Write,
        0..class,
        Some(index),
        Some((staging, AfterMap::Cache)),
    ))
}
