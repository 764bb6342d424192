//! Device memory as the memory layer counts it: what a pool holds and what holding it cost
//! ([`DeviceMemoryUsage`]), and the device's size that `per_process_memory_fraction`
//! applies to.

use std::time::Duration;

use serde::Serialize;

use crate::engine::MemoryMode;
use crate::gpu::DeviceMemoryInfo;

/// Total bytes of the device-local memory heaps behind `device`, from the one heap query in
/// [`DeviceMemoryInfo`]. `None` on other backends, where wgpu has no way to ask
/// (gfx-rs/wgpu#2447), and where the device has no device-local heap.
pub(crate) fn device_local_bytes(device: &wgpu::Device) -> Option<u64> {
    DeviceMemoryInfo::query_device(device)?.device_local_bytes()
}

/// Device memory a pool holds and what holding it cost in the driver, as the memory layer
/// (not the engine) counts it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DeviceMemoryUsage {
    /// The pool's mode.
    pub mode: MemoryMode,
    /// Bytes of device memory taken now: segment buffers, or page chunks.
    pub device_bytes: u64,
    /// The peak of `device_bytes`.
    pub device_bytes_peak: u64,
    /// Time in the driver creating and destroying segment buffers, or allocating and
    /// freeing chunks, binding pages, and creating and releasing ranges and their wrappers.
    #[serde(serialize_with = "seconds")]
    pub driver_time: Duration,
    /// Of `driver_time`: getting and giving back memory (`create_buffer` and `destroy`, or
    /// `vkAllocateMemory` and `vkFreeMemory`) on the pool's callers' threads, waits for an
    /// allocation of the page reserve in flight included.
    #[serde(serialize_with = "seconds")]
    pub allocation_time: Duration,
    /// `vkAllocateMemory` on the page reserve's own thread (`page_reserve_chunks`): off the
    /// callers' path, so not in `driver_time` (zero for segments).
    #[serde(serialize_with = "seconds")]
    pub background_allocation_time: Duration,
    /// Of `allocations`: those made by the page reserve's thread (0 for segments).
    pub background_allocations: u64,
    /// Chunks taken from the page reserve by requests that needed memory (0 for segments).
    pub reserve_taken: u64,
    /// Of `reserve_taken`: those a request had to wait for, still being allocated.
    pub reserve_waits: u64,
    /// Of `driver_time`: `vkQueueBindSparse` (and, where the device cannot order binds on
    /// the GPU, their fence waits; where it can, the empty submission before each unbind);
    /// zero for segments.
    #[serde(serialize_with = "seconds")]
    pub bind_time: Duration,
    /// CPU waits for the GPU before pages were unmapped, and for pending binds before chunks
    /// were freed or ranges released (not driver time; zero for segments).
    #[serde(serialize_with = "seconds")]
    pub unmap_wait_time: Duration,
    /// Device memory allocations made (segment buffers, or chunks).
    pub allocations: u64,
    /// Device memory given back (segment buffers destroyed, or chunks freed).
    pub frees: u64,
    /// `vkQueueBindSparse` calls the pool made (0 for segments). Binds queued for a shared
    /// call (`page_bind_batch`) that a wgpu submission sends count on the device instead
    /// ([`SparseDevice::bind_calls_at_submit`](crate::gpu::sparse::SparseDevice::bind_calls_at_submit)).
    pub bind_calls: u64,
    /// Maps queued for a call shared with other binds instead of one of their own
    /// (`page_bind_batch`; 0 for segments).
    pub maps_queued: u64,
    /// Unmaps (and unbinds of spare pages) queued the same way (0 for segments).
    pub unmaps_queued: u64,
    /// Times a new block overlapped freed bytes reached through different wrappers, so
    /// that all later GPU work was ordered after all submitted work first (0 for segments;
    /// see the pool's `Block::buffer`).
    pub wrapper_orderings: u64,
    /// CPU time those orderings took: an empty wgpu submission each, or where binds are not
    /// ordered on the GPU, a wait for it (not driver time; zero for segments).
    #[serde(serialize_with = "seconds")]
    pub ordering_time: Duration,
    /// Empty submissions that signal, for unbinds to wait for on the GPU, that all earlier
    /// work is done (part of `bind_time`): one per unbind call where work on the pool's
    /// blocks was submitted since the last, none otherwise (0 for segments).
    pub unbind_signals: u64,
    /// Address ranges created (sparse buffers; 0 for segments).
    pub ranges_created: u64,
    /// Address ranges released (0 for segments).
    pub ranges_released: u64,
    /// Extra wgpu wrappers made over ranges, so that blocks of one range get no barrier
    /// between their dispatches (0 for segments).
    pub wrappers_created: u64,
    /// Of `driver_time`: creating and releasing ranges and their wrappers (zero for
    /// segments).
    #[serde(serialize_with = "seconds")]
    pub range_time: Duration,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}
