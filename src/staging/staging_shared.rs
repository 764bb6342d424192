//! State shared by a staging pool, its staging buffers, tickets and map callbacks.

use std::collections::VecDeque;
use std::sync::Arc;

use super::cache::Cache;
use super::copy_threads::CopyThreads;
use super::error::StagingError;
use super::flight::Flight;
use super::host_buffer::{HostBuffer, Kind};
use super::options::StagingOptions;
use super::stats::Counters;
use crate::gpu::ErrorLog;
use crate::gpu::scope::{CaughtError, catch};

/// Everything behind a [`StagingPool`](super::StagingPool) handle.
///
/// Lock order: a flight's state, then the cache. No lock is held across a wgpu call that can
/// run callbacks (`submit`, `poll`, `map_async`, `unmap`).
pub(crate) struct StagingShared {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub options: StagingOptions,
    pub max_buffer_size: u64,
    pub cache: Cache,
    pub counters: Arc<Counters>,
    pub copies: CopyThreads,
    /// The device's loss record, where the staging pool was given one.
    pub error_log: Option<ErrorLog>,
}

impl StagingShared {
    pub fn new(
        device: wgpu::Device,
        queue: wgpu::Queue,
        options: StagingOptions,
        error_log: Option<ErrorLog>,
    ) -> Result<StagingShared, StagingError> {
        let max_buffer_size = device.limits().max_buffer_size;
        options.validate(max_buffer_size)?;
        let counters = Arc::new(Counters::default());
        Ok(StagingShared {
            cache: Cache::new(counters.clone(), options.max_cached_bytes),
            copies: CopyThreads::new(options.threads, options.min_bytes_per_thread),
            counters,
            max_buffer_size,
            options,
            device,
            queue,
            error_log,
        })
    }

    /// `Err` once the device is known to be lost.
    pub fn check_device(&self) -> Result<(), StagingError> {
        match &self.error_log {
            Some(log) => Ok(log.check_device()?),
            None => Ok(()),
        }
    }

    /// A staging buffer of `kind` and `class`: from the cache, or new. An upload buffer comes
    /// mapped for writing over its whole size, a download buffer unmapped.
    ///
    /// Fails with [`StagingError::DeviceLost`] once the device is lost.
    ///
    /// `window` holds the flights of the calling transfer. On a cache miss while
    /// `max_in_flight` of them are still pending, this waits for the oldest (whose callback
    /// returns its buffer to the cache) rather than creating more buffers.
    pub fn acquire(
        &self,
        kind: Kind,
        class: u64,
        window: &mut VecDeque<Arc<Flight>>,
    ) -> Result<HostBuffer, StagingError> {
        // Every transfer starts here: none starts on a lost device.
        self.check_device()?;
        let mut polled = false;
        loop {
            if let Some(buffer) = self.cache.take(kind, class) {
                return Ok(buffer);
            }
            window.retain(|flight| !flight.is_done());
            if !polled {
                // Completed work whose callbacks have not run yet frees buffers for reuse.
                polled = true;
                let _ = self.device.poll(wgpu::PollType::Poll);
                continue;
            }
            match window.front() {
                Some(oldest) if window.len() >= self.options.max_in_flight => {
                    oldest.wait()?;
                }
                _ => return self.create(kind, class),
            }
        }
    }

    /// Creates a staging buffer; on out-of-memory, empties the cache and tries once more.
    pub fn create(&self, kind: Kind, class: u64) -> Result<HostBuffer, StagingError> {
        let descriptor = wgpu::BufferDescriptor {
            label: Some(match kind {
                Kind::Upload => "wgpool staging upload",
                Kind::Download => "wgpool staging download",
            }),
            size: class,
            usage: kind.usage(),
            // Upload buffers live mapped; a fresh one is zero-filled by wgpu once, here.
            mapped_at_creation: kind == Kind::Upload,
        };
        let attempt = || catch(&self.device, || self.device.create_buffer(&descriptor));
        let buffer = match attempt() {
            Ok(buffer) => buffer,
            Err(CaughtError::OutOfMemory(_)) => {
                self.empty_cache();
                attempt().map_err(|source| StagingError::OutOfMemory {
                    kind: kind.name(),
                    size: class,
                    allocated: self.counters.snapshot().total.allocated_bytes,
                    source,
                })?
            }
            Err(other) => return Err(other.into()),
        };
        Ok(HostBuffer::new(buffer, class, kind, self.counters.clone()))
    }

    /// Destroys every cached staging buffer.
    pub fn empty_cache(&self) {
        drop(self.cache.drain());
    }

    /// Encodes `copy` and submits it alone, under error scopes. Fails with
    /// [`StagingError::DeviceLost`] when the device is lost after the submission.
    pub fn submit_copy(
        &self,
        copy: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<wgpu::SubmissionIndex, StagingError> {
        let index = catch(&self.device, || {
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("wgpool staging copy"),
                });
            copy(&mut encoder);
            self.queue.submit([encoder.finish()])
        })?;
        // wgpu drops the work of a lost device without an error: the loss record says it.
        self.check_device()?;
        self.counters.chunk();
        Ok(index)
    }
}

impl Drop for StagingShared {
    fn drop(&mut self) {
        self.empty_cache();
    }
}
