//! Page mapping on Vulkan: sparse binding behind the pool.
//!
//! A buffer created with `SPARSE_BINDING | SPARSE_RESIDENCY` has address space but no
//! memory; `vkQueueBindSparse` binds device memory into it page by page and unbinds it. That
//! is virtual memory for a wgpu pool: one large buffer per address range, physical pages
//! mapped where blocks live.
//!
//! - [`request_device`]: opens a wgpu device with sparse binding enabled (wgpu cannot enable
//!   it itself), with a queue of the pool's own where the adapter has one.
//! - [`sparse_device`]: whether a device can map pages, and its [`SparseFacts`].
//! - [`PagedMemory`]: one pool's ranges and device memory chunks, mapped and unmapped in
//!   batched binds.
//!
//! # Queues
//!
//! Binding is a queue operation, and a `VkQueue` must not be used by two threads at once.
//! Where the adapter's queue family 0 has two queues (NVIDIA has 16), wgpu gets queue 0 and
//! pools bind on queue 1. Where it has one (lavapipe), binds share wgpu's queue and are
//! serialized with every wgpu submission by a lock that wgpu's own Vulkan function table goes
//! through (the `gate` module): submissions from any number of application threads stay
//! correct while pools bind.

mod address_space;
mod batch;
mod chunks;
mod counters;
mod device;
mod error;
mod gate;
mod open;
mod page_plan;
mod paged;
mod range;
mod reserve;
mod timeline;

pub use address_space::describe_address_space;
pub use chunks::{ChunkCounters, ChunkPolicy};
pub use counters::{PagedCounters, PagedUsage};
pub use device::{SparseDevice, SparseFacts};
pub use error::SparseError;
pub use open::{
    AdapterPageMapping, NoPageMapping, adapter_page_mapping, request_device, sparse_device,
};
pub use paged::PagedMemory;
