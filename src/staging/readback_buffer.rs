//! `ReadbackBuffer`: host memory a block is downloaded into by DMA and read in place, the
//! analog of pinned host memory for device-to-host copies.

use std::marker::PhantomData;
use std::sync::Arc;

use super::download::check_download;
use super::error::StagingError;
use super::flight::{AfterMap, Flight};
use super::host_buffer::HostBuffer;
use super::staging_shared::StagingShared;
use crate::pool::Block;

enum State {
    /// Unmapped and holding no download.
    Empty,
    /// A download into it was submitted; `len` bytes arrive.
    InFlight(Arc<Flight>, u64),
    /// Mapped; the first `len` bytes are the last download.
    Mapped(u64),
    /// A map failed; the buffer cannot be used.
    Broken(String),
}

/// A staging buffer for downloads that the caller reads in place: download a block into it
/// with [`StagingPool::download_to_readback`](super::StagingPool::download_to_readback),
/// then read the bytes with [`view`](ReadbackBuffer::view), with no further CPU copy.
///
/// Memory: `MAP_READ | COPY_DST`, cached host memory that the GPU fills by DMA.
///
/// Guarantees:
/// - a view exists only while the download has completed and nothing is in flight; a new
///   download needs `&mut self`, so it cannot change bytes under a live view;
/// - dropped, its buffer goes back to the pool's cache (once any download into it is
///   done) and serves later downloads of its size class.
///
/// ```no_run
/// use wgpool::config::Config;
/// use wgpool::gpu::{GpuContext, HeadlessOptions};
/// use wgpool::pool::Pool;
/// use wgpool::staging::{StagingOptions, StagingPool};
///
/// let gpu = GpuContext::headless(&HeadlessOptions::default())?;
/// let pool = Pool::from_context(&gpu, Config::default())?;
/// let staging = StagingPool::from_pool(&pool, StagingOptions::default())?;
/// let block = pool.alloc(4096)?;
/// staging.upload(&block, &[3u8; 4096])?;
/// let mut readback = staging.alloc_readback_buffer(4096)?;
/// staging.download_to_readback(&block, &mut readback)?; // returns at once
/// let bytes = readback.view()?; // waits for the DMA; reads the mapped memory in place
/// assert!(bytes.iter().all(|&b| b == 3));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ReadbackBuffer {
    shared: Arc<StagingShared>,
    staging: Option<HostBuffer>,
    len: u64,
    state: State,
}

/// The bytes of the last download into a [`ReadbackBuffer`], read in place. Derefs to
/// `[u8]`.
pub struct ReadView<'a> {
    view: wgpu::BufferView,
    len: usize,
    _buffer: PhantomData<&'a ReadbackBuffer>,
}

impl std::ops::Deref for ReadView<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.view[..self.len]
    }
}

impl ReadbackBuffer {
    pub(crate) fn new(shared: Arc<StagingShared>, staging: HostBuffer, len: u64) -> ReadbackBuffer {
        ReadbackBuffer {
            shared,
            staging: Some(staging),
            len,
            state: State::Empty,
        }
    }

    /// The most bytes one download into it may deliver.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size of the buffer behind it (its size class).
    pub fn capacity(&self) -> u64 {
        self.staging.as_ref().map_or(0, |s| s.class())
    }

    /// Whether the last download has arrived. Drives wgpu once, without blocking.
    pub fn is_ready(&self) -> bool {
        match &self.state {
            State::Mapped(_) => true,
            State::InFlight(flight, _) => flight.poll_done(),
            State::Empty | State::Broken(_) => false,
        }
    }

    /// Blocks until the last download has arrived; how many bytes it delivered.
    pub fn wait(&mut self) -> Result<u64, StagingError> {
        match &self.state {
            State::Mapped(len) => Ok(*len),
            State::Empty => Err(StagingError::NothingDownloaded),
            State::Broken(reason) => Err(StagingError::Broken(reason.clone())),
            State::InFlight(flight, len) => {
                let len = *len;
                match flight.wait() {
                    Ok(()) => {
                        self.state = State::Mapped(len);
                        Ok(len)
                    }
                    Err(error) => {
                        self.state = State::Broken(error.to_string());
                        Err(error)
                    }
                }
            }
        }
    }

    /// The bytes of the last download, read in place, after waiting for them.
    pub fn view(&mut self) -> Result<ReadView<'_>, StagingError> {
        let len = self.wait()?;
        let Some(staging) = &self.staging else {
            return Err(StagingError::Broken("the buffer is gone".into()));
        };
        let view = staging
            .buffer()
            .get_mapped_range(0..(len.div_ceil(4) * 4).max(4))
            .map_err(|e| StagingError::Map(e.to_string()))?;
        Ok(ReadView {
            view,
            len: len as usize,
            _buffer: PhantomData,
        })
    }

    /// Copies the bytes of the last download into `dst` (of exactly as many bytes) on the
    /// pool's copy threads, after waiting for them.
    pub fn read_into(&mut self, dst: &mut [u8]) -> Result<(), StagingError> {
        let shared = self.shared.clone();
        let view = self.view()?;
        if view.len() != dst.len() {
            return Err(StagingError::LengthMismatch {
                what: "ReadbackBuffer::read_into",
                expected: view.len() as u64,
                got: dst.len() as u64,
            });
        }
        shared.copies.copy(&view, dst);
        Ok(())
    }

    /// Submits the copy of `block`'s `size()` bytes into it (see
    /// [`StagingPool::download_to_readback`](super::StagingPool::download_to_readback)).
    pub(crate) fn download(&mut self, block: &Block) -> Result<(), StagingError> {
        let what = "download_to_readback";
        check_download(what, &self.shared.device, block, block.size())?;
        if block.size() > self.len {
            return Err(StagingError::TooLong {
                what,
                len: block.size(),
                destination: "the readback buffer",
                capacity: self.len,
            });
        }
        // Finish what is in flight, then unmap: the GPU may only write it unmapped.
        match &self.state {
            State::Broken(reason) => return Err(StagingError::Broken(reason.clone())),
            State::InFlight(..) => {
                self.wait()?;
            }
            State::Empty | State::Mapped(_) => {}
        }
        let shared = self.shared.clone();
        let Some(staging) = &self.staging else {
            return Err(StagingError::Broken("the buffer is gone".into()));
        };
        if let State::Mapped(_) = self.state {
            staging.buffer().unmap();
            self.state = State::Empty;
        }
        shared.counters.downloaded(block.size());
        let padded = block.bound_size();
        let index = shared.submit_copy(|encoder| {
            encoder.copy_buffer_to_buffer(
                block.place().0,
                block.place().1,
                staging.buffer(),
                0,
                padded,
            );
        })?;
        let flight = Flight::start(
            &shared,
            staging.buffer(),
            wgpu::MapMode::Read,
            0..padded,
            Some(index),
            None,
        );
        self.state = State::InFlight(flight, block.size());
        Ok(())
    }
}

impl Drop for ReadbackBuffer {
    fn drop(&mut self) {
        let Some(staging) = self.staging.take() else {
            return;
        };
        match std::mem::replace(&mut self.state, State::Empty) {
            State::Empty => self.shared.cache.put(staging),
            State::Mapped(_) => {
                staging.buffer().unmap();
                self.shared.cache.put(staging);
            }
            State::InFlight(flight, _) => flight.abandon(
                staging,
                AfterMap::UnmapThenCache,
                &Arc::downgrade(&self.shared),
            ),
            State::Broken(_) => drop(staging),
        }
    }
}

impl std::fmt::Debug for ReadbackBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadbackBuffer")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}
