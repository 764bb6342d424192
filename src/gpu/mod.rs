//! Headless wgpu device set-up, adapter facts, device memory and error scopes.
//!
//! - [`GpuContext`]: instance, adapter, device and queue, opened from [`HeadlessOptions`] and
//!   the `WGPU_*` environment variables, with the adapter's own limits and an error handler
//!   that records instead of panicking.
//! - [`DeviceMemoryInfo`]: Vulkan memory heaps, budget and usage.
//! - [`BackendCapabilities`]: what a pool gets on an adapter or device (page mapping, host
//!   overflow, timestamps, f16, memory heaps and budget, binding limits), and why not.
//! - [`transfer`]: upload and readback of buffer regions (tests and benchmarks).
//! - [`scope`]: running a closure under wgpu error scopes.
//! - [`sparse`]: page mapping with Vulkan sparse binding.

mod adapter_summary;
mod capabilities;
mod context;
mod device_lost;
mod error;
mod error_log;
// Audited: one hal borrow to read a device's address.
#[allow(unsafe_code)]
mod identity;
// Audited: Vulkan property queries through wgpu-hal, each with its SAFETY comment.
#[allow(unsafe_code)]
mod memory;
pub mod scope;
// Audited: raw Vulkan (ash) for sparse binding; every unsafe block states its rule.
#[allow(unsafe_code)]
pub mod sparse;
pub mod transfer;

pub use adapter_summary::{AdapterSummary, device_type_name};
pub use capabilities::{BackendCapabilities, BindingLimits, Support};
pub use context::{
    GpuContext, HeadlessOptions, OPTIONAL_FEATURES, create_instance, enumerate_adapters,
};
pub use device_lost::DeviceLost;
pub use error::GpuError;
pub use error_log::{ErrorLog, error_text};
pub(crate) use identity::DeviceKey;
pub use identity::same_device;
pub use memory::{DeviceMemoryInfo, MemoryHeap};
