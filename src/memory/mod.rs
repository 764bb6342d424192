//! The memory layer: the one place where the engine's segments and pages meet wgpu.
//!
//! Below it, the engine places blocks in abstract segments and ranges, and
//! [`gpu::sparse`](crate::gpu::sparse) drives Vulkan sparse binding; above it, the pool
//! hands out blocks. Here:
//!
//! - `plan`: the one decision of a pool's memory mode, from the configuration and the
//!   device; the engine and the backing are both built from it.
//! - `backing`: what backs a device pool's engine, segments or pages, with the pool's
//!   event log while it records.
//! - `segments`: fixed segments, one wgpu buffer each.
//! - [`PagedSource`] (`paged`): address ranges as the engine's source, and `wrappers`,
//!   the wgpu buffers blocks of a range are reached through.
//! - `host_tier`: host-resident segments, where overflow and offloaded blocks live.
//! - `residency`: which blocks to evict to make room under a budget (pure).
//! - `device_memory`: device memory as this layer counts it ([`DeviceMemoryUsage`]) and the
//!   device's size.
//!
//! It imports the configuration, the engine, the gpu layer and history, and nothing above.

mod backing;
mod cuda_segment_addresses;
mod device_memory;
mod host_tier;
mod paged;
mod plan;
pub(crate) mod residency;
mod segments;
mod wrappers;

pub(crate) use backing::{Backing, for_plan};
pub use device_memory::DeviceMemoryUsage;
pub(crate) use device_memory::device_local_bytes;
pub(crate) use host_tier::HostTier;
pub use host_tier::{BINDABLE_HOST_USAGE, STAGING_HOST_USAGE};
pub use paged::PagedSource;
pub(crate) use plan::{PlanError, plan};
pub(crate) use segments::SegmentBuffers;
pub(crate) use wrappers::{EXPOSED, TRANSFERRED, WorkClock};
