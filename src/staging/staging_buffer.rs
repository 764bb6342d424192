//! `StagingBuffer`: mapped upload memory the user fills in place, the analog of pinned host
//! memory for host-to-device copies.

use std::marker::PhantomData;
use std::sync::Arc;

use super::error::StagingError;
use super::flight::{AfterMap, Flight};
use super::host_buffer::HostBuffer;
use super::staging_shared::StagingShared;
use super::upload::check_upload;
use crate::pool::Block;

enum State {
    /// Mapped for writing; the CPU may write.
    Mapped,
    /// A copy from it was submitted; mapped again once the GPU is done.
    InFlight(Arc<Flight>),
    /// A map failed; the buffer cannot be used.
    Broken(String),
}

/// A staging buffer for uploads that the caller writes in place: fill it, then
/// [`upload_to`](StagingBuffer::upload_to) a block with no further CPU copy.
///
/// Memory: `MAP_WRITE | COPY_SRC`. On discrete GPUs with a large BAR (the H200) that is
/// device memory the CPU writes through PCIe, which is why it can only be written, never
/// read, from the CPU: [`write_view`](StagingBuffer::write_view) gives a
/// [`wgpu::WriteOnly`] view, not a `&mut [u8]`. Write it with several threads
/// ([`write_at`](StagingBuffer::write_at) does) for the best rate.
///
/// Guarantees:
/// - while a copy from it runs on the GPU, every write access waits until the copy is
///   done, so an upload in flight is never changed by a later write;
/// - after an upload, bytes keep their values: write only what changes for the next one;
/// - dropped, its buffer goes back to the pool's cache (once any copy from it is done) and
///   serves later uploads of its size class.
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
/// let block = pool.alloc(1 << 20)?;
/// let mut buffer = staging.alloc_staging_buffer(1 << 20)?;
/// buffer.write_view()?.as_write_only().fill(7); // fill in place
/// buffer.upload_to(&block)?; // one GPU copy, no CPU copy
/// buffer.wait()?; // the GPU has finished the copy; the buffer is writable again
/// assert_eq!(staging.download(&block)?, vec![7u8; 1 << 20]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct StagingBuffer {
    shared: Arc<StagingShared>,
    staging: Option<HostBuffer>,
    len: u64,
    state: State,
}

/// Write access to a [`StagingBuffer`]'s `len()` mapped bytes.
pub struct StagingWrite<'a> {
    view: wgpu::BufferViewMut,
    len: usize,
    _buffer: PhantomData<&'a mut StagingBuffer>,
}

impl StagingWrite<'_> {
    /// The bytes, write-only (see [`wgpu::WriteOnly`]: `copy_from_slice`, `fill`,
    /// `split_at`, `write_iter`, ...).
    pub fn as_write_only(&mut self) -> wgpu::WriteOnly<'_, [u8]> {
        self.view.slice(..self.len)
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl StagingBuffer {
    pub(crate) fn new(shared: Arc<StagingShared>, staging: HostBuffer, len: u64) -> StagingBuffer {
        StagingBuffer {
            shared,
            staging: Some(staging),
            len,
            state: State::Mapped,
        }
    }

    /// The bytes asked for; what [`upload_to`](Self::upload_to) copies.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size of the buffer behind it (its size class).
    pub fn capacity(&self) -> u64 {
        self.staging.as_ref().map_or(0, |s| s.class())
    }

    /// Whether it may be written now without waiting. Drives wgpu once, without blocking.
    pub fn is_ready(&self) -> bool {
        match &self.state {
            State::Mapped => true,
            State::InFlight(flight) => flight.poll_done(),
            State::Broken(_) => false,
        }
    }

    /// Blocks until the GPU has finished any upload from it and it is mapped again.
    pub fn wait(&mut self) -> Result<(), StagingError> {
        match &self.state {
            State::Mapped => Ok(()),
            State::Broken(reason) => Err(StagingError::Broken(reason.clone())),
            State::InFlight(flight) => match flight.wait() {
                Ok(()) => {
                    self.state = State::Mapped;
                    Ok(())
                }
                Err(error) => {
                    self.state = State::Broken(error.to_string());
                    Err(error)
                }
            },
        }
    }

    /// Write access to the `len()` bytes, after any upload from it has finished.
    pub fn write_view(&mut self) -> Result<StagingWrite<'_>, StagingError> {
        self.wait()?;
        let staging = self.mapped_buffer()?;
        let view = staging
            .get_mapped_range_mut(0..padded(self.len.max(4)))
            .map_err(|e| StagingError::Map(e.to_string()))?;
        Ok(StagingWrite {
            view,
            len: self.len as usize,
            _buffer: PhantomData,
        })
    }

    /// Copies `data` to `offset..offset + data.len()`, on the pool's copy threads, after any
    /// upload from it has finished.
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), StagingError> {
        let end = offset.saturating_add(data.len() as u64);
        if end > self.len {
            return Err(StagingError::OutOfRange {
                what: "StagingBuffer::write_at",
                offset,
                end,
                len: self.len,
            });
        }
        if data.is_empty() {
            return Ok(());
        }
        let shared = self.shared.clone();
        let mut view = self.write_view()?;
        let mut target = view.as_write_only();
        let mut target = target.slice(offset as usize..end as usize);
        shared.copies.copy_to_write_only(data, &mut target);
        Ok(())
    }

    /// Uploads `len()` bytes into the start of `block`: one GPU copy, no CPU copy. Returns
    /// once the copy is submitted; work submitted afterwards sees the data. The buffer is
    /// mapped again when the GPU is done; writes wait for that (or call
    /// [`wait`](Self::wait)).
    ///
    /// The block must hold `len()` bytes, and `len()` must be a multiple of 4 unless it is
    /// the block's whole size.
    pub fn upload_to(&mut self, block: &Block) -> Result<(), StagingError> {
        check_upload(
            "StagingBuffer::upload_to",
            &self.shared.device,
            block,
            self.len,
        )?;
        self.wait()?;
        self.shared.counters.uploaded(self.len);
        if self.len == 0 {
            return Ok(());
        }
        let shared = self.shared.clone();
        let padded_len = padded(self.len);
        {
            // Zero the pad past len(), so no stale bytes land in the block's capacity.
            let mut view = self.write_view()?;
            let mut all = view.view.slice(..padded_len as usize);
            all.slice(self.len as usize..).fill(0);
        }
        let buffer = self.mapped_buffer()?.clone();
        buffer.unmap();
        let submitted = shared.submit_copy(|encoder| {
            encoder.copy_buffer_to_buffer(&buffer, 0, block.place().0, block.place().1, padded_len);
        });
        let class = self.capacity();
        let (submission, result) = match submitted {
            Ok(index) => (Some(index), Ok(())),
            // Map it again anyway, so the buffer stays usable.
            Err(error) => (None, Err(error)),
        };
        let flight = Flight::start(
            &shared,
            &buffer,
            wgpu::MapMode::Write,
            0..class,
            submission,
            None,
        );
        self.state = State::InFlight(flight);
        result
    }

    fn mapped_buffer(&self) -> Result<&wgpu::Buffer, StagingError> {
        self.staging
            .as_ref()
            .map(|s| s.buffer())
            .ok_or_else(|| StagingError::Broken("the buffer is gone".into()))
    }
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        let Some(staging) = self.staging.take() else {
            return;
        };
        match std::mem::replace(&mut self.state, State::Mapped) {
            State::Mapped => self.shared.cache.put(staging),
            State::InFlight(flight) => {
                flight.abandon(staging, AfterMap::Cache, &Arc::downgrade(&self.shared))
            }
            State::Broken(_) => drop(staging),
        }
    }
}

impl std::fmt::Debug for StagingBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagingBuffer")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("ready", &matches!(self.state, State::Mapped))
            .finish()
    }
}

fn padded(len: u64) -> u64 {
    len.div_ceil(4) * 4
}
