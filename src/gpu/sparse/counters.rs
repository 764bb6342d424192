//! What a [`PagedMemory`](super::PagedMemory) has done and holds: its counters of driver
//! work and its usage now.

use std::time::Duration;

use super::chunks::ChunkCounters;

/// Counters of driver work, for `driver_time_s` and the bind statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct PagedCounters {
    /// Chunk allocation and freeing.
    pub chunks: ChunkCounters,
    /// `vkQueueBindSparse` calls this memory made: binds, and submissions of the binds queued
    /// on the device that it made (when its bind filled the batch, before an unbind's new
    /// signal, for [`submit_queued_binds`](super::PagedMemory::submit_queued_binds)). A wgpu
    /// submission that submits queued binds counts on the device
    /// ([`SparseDevice::bind_calls_at_submit`](super::SparseDevice::bind_calls_at_submit)).
    pub bind_calls: u64,
    /// Maps queued on the device for a call shared with other binds instead of a call of
    /// their own (`page_bind_batch`).
    pub maps_queued: u64,
    /// Unmaps and unbinds of spare pages queued the same way.
    pub unmaps_queued: u64,
    /// Maps served wholly by spare pages already bound where they were asked for, with no
    /// driver call.
    pub maps_from_spare: u64,
    /// Bytes bound as spare pages over the memory's life.
    pub spare_bound_bytes_total: u64,
    /// Time in those calls and their fence waits, and in the empty wgpu submissions that
    /// mark the work an unbind waits for.
    pub bind_time: Duration,
    /// Ranges created.
    pub ranges_created: u64,
    /// Ranges released.
    pub ranges_released: u64,
    /// Extra wgpu wrappers made over ranges ([`alias_buffer`](super::PagedMemory::alias_buffer)).
    pub wrappers_created: u64,
    /// Time creating and releasing ranges (the sparse `VkBuffer` and its wgpu wrappers) and
    /// making extra wrappers over them.
    pub range_time: Duration,
    /// Time waiting for the GPU before unbinding pages, and for pending binds before a
    /// range's buffer or a chunk is given back.
    pub unmap_wait_time: Duration,
    /// Bytes bound over the memory's life.
    pub mapped_bytes_total: u64,
    /// Bytes unbound over the memory's life.
    pub unmapped_bytes_total: u64,
    /// Orderings of all later GPU work after all earlier work
    /// ([`order_after_submitted`](super::PagedMemory::order_after_submitted)).
    pub orderings: u64,
    /// Empty submissions that signal the GPU timeline for unbinds to wait for (at most one
    /// per unbind call; fewer where the work clock shows nothing new was submitted).
    pub unbind_signals: u64,
    /// CPU time spent in them (the GPU waits where binds are not ordered on the GPU).
    pub ordering_time: Duration,
}

impl PagedCounters {
    /// Time in the driver on the callers' threads: memory allocation and freeing (and
    /// waits for a reserve allocation in flight), binds, and creating and releasing ranges
    /// and their wrappers (the waits for the GPU before unbinding are not driver time, nor
    /// is the reserve's thread's time, [`ChunkCounters::background_time`]).
    pub fn driver_time(&self) -> Duration {
        self.chunks.time + self.bind_time + self.range_time
    }
}

/// What the memory holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PagedUsage {
    /// Bytes of device memory in chunks and in the reserve.
    pub device_bytes: u64,
    /// Of `device_bytes`: the reserve's, allocated ahead of demand (or being allocated).
    pub reserve_bytes: u64,
    /// Bytes of pages bound into ranges for blocks (maps), spare pages not included.
    pub mapped_bytes: u64,
    /// Bytes of spare pages: bound past the end of a map, for the next map there.
    pub spare_bytes: u64,
    /// Bytes of address space reserved by ranges.
    pub range_bytes: u64,
    /// Live ranges.
    pub ranges: usize,
    /// Live chunks.
    pub chunks: usize,
}
