//! Upload into and readback from regions of device buffers, for tests, verification and
//! benchmarks. Not a fast path: the pool's staging belt is.

use std::sync::mpsc;

use super::scope::{CaughtError, catch};

/// Bytes moved per staging round trip.
const CHUNK_BYTES: u64 = 64 << 20;

/// Why an upload or readback failed.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum TransferError {
    /// Offset or size are not multiples of 4 bytes.
    #[error(
        "buffer region at offset {offset} with size {size}: offset and size must be multiples of 4 bytes"
    )]
    Misaligned {
        /// Region start.
        offset: u64,
        /// Region length.
        size: u64,
    },
    /// The region does not fit inside the buffer.
    #[error("buffer region {offset}..{end} lies outside the buffer of {buffer_size} bytes")]
    OutOfRange {
        /// Region start.
        offset: u64,
        /// Region end (exclusive).
        end: u64,
        /// The buffer's size.
        buffer_size: u64,
    },
    /// More data than the block holds.
    #[error("{len} bytes do not fit a block of {size} bytes")]
    BeyondBlock {
        /// Bytes given.
        len: u64,
        /// The block's size.
        size: u64,
    },
    /// The buffer was created without a usage the transfer needs.
    #[error("the buffer lacks usage {needed}; create it with {needed} to {purpose}")]
    MissingUsage {
        /// The usage flag needed.
        needed: &'static str,
        /// What it is needed for.
        purpose: &'static str,
    },
    /// wgpu reported an error.
    #[error(transparent)]
    Gpu(#[from] CaughtError),
    /// Mapping the staging buffer failed.
    #[error("mapping the staging buffer failed: {0}")]
    Map(String),
    /// Waiting for the device failed.
    #[error("waiting for the device failed: {0}")]
    Poll(#[from] wgpu::PollError),
}

fn check_region(buffer: &wgpu::Buffer, offset: u64, size: u64) -> Result<(), TransferError> {
    if offset % 4 != 0 || size % 4 != 0 {
        return Err(TransferError::Misaligned { offset, size });
    }
    let end = offset.saturating_add(size);
    if end > buffer.size() {
        return Err(TransferError::OutOfRange {
            offset,
            end,
            buffer_size: buffer.size(),
        });
    }
    Ok(())
}

/// Writes `data` into `buffer` at `offset` and waits until the write has been submitted.
///
/// Requires `COPY_DST` usage, offset and length multiples of 4. After it returns, GPU work
/// submitted later sees the data.
pub fn write_region(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    buffer: &wgpu::Buffer,
    offset: u64,
    data: &[u8],
) -> Result<(), TransferError> {
    check_region(buffer, offset, data.len() as u64)?;
    if !buffer.usage().contains(wgpu::BufferUsages::COPY_DST) {
        return Err(TransferError::MissingUsage {
            needed: "COPY_DST",
            purpose: "write into it",
        });
    }
    for (index, chunk) in data.chunks(CHUNK_BYTES as usize).enumerate() {
        let at = offset + index as u64 * CHUNK_BYTES;
        catch(device, || {
            queue.write_buffer(buffer, at, chunk);
            // Submitting flushes the staged write, so staging memory stays at one chunk.
            queue.submit([]);
        })?;
    }
    Ok(())
}

/// Reads `size` bytes of `buffer` from `offset`, after all work submitted so far.
///
/// Requires `COPY_SRC` usage, offset and size multiples of 4. Blocks until the data is
/// on the host. Goes through a `MAP_READ` staging buffer of at most 64 MiB.
pub fn read_region(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    buffer: &wgpu::Buffer,
    offset: u64,
    size: u64,
) -> Result<Vec<u8>, TransferError> {
    check_region(buffer, offset, size)?;
    if !buffer.usage().contains(wgpu::BufferUsages::COPY_SRC) {
        return Err(TransferError::MissingUsage {
            needed: "COPY_SRC",
            purpose: "read it back",
        });
    }
    let mut out = Vec::with_capacity(size as usize);
    if size == 0 {
        return Ok(out);
    }
    let staging = catch(device, || {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpool readback staging"),
            size: size.min(CHUNK_BYTES),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    })?;
    let mut done = 0;
    while done < size {
        let chunk = (size - done).min(CHUNK_BYTES);
        catch(device, || {
            let mut encoder = device.create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(buffer, offset + done, &staging, 0, chunk);
            queue.submit([encoder.finish()]);
        })?;
        map_read_into(device, &staging, 0..chunk, &mut out)?;
        done += chunk;
    }
    Ok(out)
}

/// Maps `range` of a `MAP_READ` buffer, appends its bytes to `out`, and unmaps it. Waits
/// for all submitted work first, so the bytes are those the GPU last wrote. The buffer must
/// not be in use by commands recorded but not yet submitted.
pub fn map_read_into(
    device: &wgpu::Device,
    buffer: &wgpu::Buffer,
    range: std::ops::Range<u64>,
    out: &mut Vec<u8>,
) -> Result<(), TransferError> {
    let (sender, receiver) = mpsc::channel();
    buffer.map_async(wgpu::MapMode::Read, range.clone(), move |result| {
        let _ = sender.send(result);
    });
    device.poll(wgpu::PollType::wait_indefinitely())?;
    match receiver.recv() {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return Err(TransferError::Map(error.to_string())),
        Err(_) => return Err(TransferError::Map("the map callback never ran".into())),
    }
    {
        let view = buffer
            .get_mapped_range(range)
            .map_err(|e| TransferError::Map(e.to_string()))?;
        out.extend_from_slice(&view);
    }
    buffer.unmap();
    Ok(())
}

crate::error_debug::debug_as_message!(TransferError);
