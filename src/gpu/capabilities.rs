//! What a pool gets on one adapter or device, stated per capability with how it is provided
//! or why it is not.

use serde::Serialize;

use super::context::OPTIONAL_FEATURES;
use super::memory::DeviceMemoryInfo;
use super::sparse::{NoPageMapping, adapter_page_mapping, describe_address_space, sparse_device};
use crate::format::bytes;

/// Whether a capability is there: through what, or why not and what the pool does instead.
///
/// In JSON: `{"available": true, "via": "..."}` or `{"available": false, "reason": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Support {
    /// Available; the text names what provides it.
    Yes {
        /// What provides it (a wgpu feature, a Vulkan extension, ...).
        via: String,
    },
    /// Not available; the text says why, and what the pool and the tools do instead.
    No {
        /// Why not, and the fallback.
        reason: String,
    },
}

impl Support {
    /// Whether the capability is available.
    pub fn is_available(&self) -> bool {
        matches!(self, Support::Yes { .. })
    }

    /// What provides it, or why it is missing.
    pub fn text(&self) -> &str {
        match self {
            Support::Yes { via } => via,
            Support::No { reason } => reason,
        }
    }

    fn yes(via: impl Into<String>) -> Support {
        Support::Yes { via: via.into() }
    }

    fn no(reason: impl Into<String>) -> Support {
        Support::No {
            reason: reason.into(),
        }
    }
}

impl Serialize for Support {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = serializer.serialize_struct("Support", 2)?;
        out.serialize_field("available", &self.is_available())?;
        match self {
            Support::Yes { via } => out.serialize_field("via", via)?,
            Support::No { reason } => out.serialize_field("reason", reason)?,
        }
        out.end()
    }
}

/// The limits that bound what one pool block can be and how kernels bind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BindingLimits {
    /// `max_buffer_size`: the largest segment buffer, so the largest block in segments mode.
    pub max_buffer_size: u64,
    /// `max_storage_buffer_binding_size`: the most bytes of a block one storage binding
    /// reaches; larger blocks are bound in windows (`Block::binding_range`).
    pub max_storage_buffer_binding_size: u64,
    /// `min_storage_buffer_offset_alignment`: pools need it to divide 512 B, the block
    /// alignment.
    pub min_storage_buffer_offset_alignment: u32,
    /// `max_storage_buffers_per_shader_stage`: storage operands one kernel can bind.
    pub max_storage_buffers_per_shader_stage: u32,
}

impl BindingLimits {
    /// The binding limits of `limits`.
    pub fn new(limits: &wgpu::Limits) -> BindingLimits {
        BindingLimits {
            max_buffer_size: limits.max_buffer_size,
            max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
            min_storage_buffer_offset_alignment: limits.min_storage_buffer_offset_alignment,
            max_storage_buffers_per_shader_stage: limits.max_storage_buffers_per_shader_stage,
        }
    }
}

/// What a pool gets on an adapter's backend and driver, capability by capability.
///
/// Guarantees:
/// - every capability is either [`Support::Yes`], naming what provides it, or
///   [`Support::No`], saying why not and what the pool does instead, in the words the pool's
///   own errors and `memory_mode_reason` use;
/// - [`of_device`](Self::of_device) describes the device as it was opened (its features, and
///   whether [`sparse::request_device`](super::sparse::request_device) enabled page mapping
///   on it); [`of_adapter`](Self::of_adapter) describes what
///   [`GpuContext`](super::GpuContext) would open there, without opening a device.
///
/// ```no_run
/// use wgpool::gpu::{GpuContext, HeadlessOptions};
/// let gpu = GpuContext::headless(&HeadlessOptions::default())?;
/// let capabilities = gpu.capabilities();
/// for (name, support) in capabilities.rows() {
///     println!("{name}: {} ({})", support.is_available(), support.text());
/// }
/// # Ok::<(), wgpool::gpu::GpuError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BackendCapabilities {
    /// `vulkan`, `gl`, `dx12`, `metal`, ...
    pub backend: String,
    /// Pages mapped into reserved address ranges (`expandable_segments`); without it pools
    /// use fixed segment buffers and `expandable_segments:True` is refused.
    pub page_mapping: Support,
    /// Kernels binding host memory (`MAPPABLE_PRIMARY_BUFFERS`): `overflow:host`, and
    /// offloaded blocks that stay bindable.
    pub host_overflow: Support,
    /// GPU timestamps for kernel (and copy) timing in `wgpool bench`.
    pub timestamps: Support,
    /// `f16` kernels (`SHADER_F16`).
    pub f16: Support,
    /// The size of device memory, which `per_process_memory_fraction` is a fraction of.
    pub memory_heaps: Support,
    /// The driver's per-process budget and usage of each heap (`VK_EXT_memory_budget`).
    pub memory_budget: Support,
    /// The limits that bound blocks and their bindings.
    pub binding_limits: BindingLimits,
}

impl BackendCapabilities {
    /// What a device that [`GpuContext`](super::GpuContext) opens on `adapter` gets: the
    /// adapter's share of [`OPTIONAL_FEATURES`], page mapping where the adapter has sparse
    /// binding, and the adapter's limits. Opens no device.
    pub fn of_adapter(adapter: &wgpu::Adapter) -> BackendCapabilities {
        let features = adapter.features() & OPTIONAL_FEATURES;
        let page_mapping = match adapter_page_mapping(adapter) {
            Ok(support) => Support::yes(format!(
                "Vulkan sparse binding, {}",
                describe_address_space(support.address_space, support.reported_address_space)
            )),
            Err(why) => no_page_mapping(why),
        };
        Self::build(
            adapter,
            features,
            adapter.features(),
            page_mapping,
            &adapter.limits(),
        )
    }

    /// What pools on `device`, opened on `adapter`, get: the device's enabled features and
    /// limits, and page mapping as the device has it.
    pub fn of_device(adapter: &wgpu::Adapter, device: &wgpu::Device) -> BackendCapabilities {
        let page_mapping = match sparse_device(device) {
            Ok(sparse) => {
                let facts = sparse.facts();
                Support::yes(format!(
                    "Vulkan sparse binding, {} pages, {}",
                    bytes(facts.page_size),
                    describe_address_space(facts.address_space, facts.reported_address_space)
                ))
            }
            Err(why) => no_page_mapping(why),
        };
        Self::build(
            adapter,
            device.features(),
            adapter.features(),
            page_mapping,
            &device.limits(),
        )
    }

    /// The capabilities by name, in the order `wgpool info` prints them (the names are the
    /// JSON keys).
    pub fn rows(&self) -> [(&'static str, &Support); 6] {
        [
            ("page_mapping", &self.page_mapping),
            ("host_overflow", &self.host_overflow),
            ("timestamps", &self.timestamps),
            ("f16", &self.f16),
            ("memory_heaps", &self.memory_heaps),
            ("memory_budget", &self.memory_budget),
        ]
    }

    fn build(
        adapter: &wgpu::Adapter,
        enabled: wgpu::Features,
        offered: wgpu::Features,
        page_mapping: Support,
        limits: &wgpu::Limits,
    ) -> BackendCapabilities {
        let backend = adapter.get_info().backend;
        let memory = DeviceMemoryInfo::query(adapter);
        BackendCapabilities {
            backend: backend.to_str().to_string(),
            page_mapping,
            host_overflow: feature(
                enabled,
                offered,
                wgpu::Features::MAPPABLE_PRIMARY_BUFFERS,
                "MAPPABLE_PRIMARY_BUFFERS",
                "wgpu offers it on Vulkan, DX12 and Metal, never on GL; overflow:host is \
                 refused, and offloaded blocks must be prefetched before a kernel binds them",
            ),
            timestamps: timestamps(enabled, offered),
            f16: feature(
                enabled,
                offered,
                wgpu::Features::SHADER_F16,
                "SHADER_F16",
                "the f16 kernels are refused, and wgpool bench leaves them out",
            ),
            memory_heaps: match &memory {
                Some(info) => Support::yes(match info.device_local_bytes() {
                    Some(total) => format!("Vulkan memory heaps, {} device-local", bytes(total)),
                    None => "Vulkan memory heaps, none device-local".to_string(),
                }),
                None => Support::no(format!(
                    "not a Vulkan adapter ({}): wgpu has no portable memory query \
                     (gfx-rs/wgpu#2447) and wgpool reads heaps through Vulkan only; \
                     per_process_memory_fraction needs memory_limit_mb here",
                    backend.to_str()
                )),
            },
            memory_budget: match &memory {
                Some(info) if info.budget_supported => Support::yes("VK_EXT_memory_budget"),
                Some(_) => Support::no(
                    "the driver lacks VK_EXT_memory_budget: heap sizes are known, this \
                     process's usage of them is not",
                ),
                None => Support::no(format!(
                    "not a Vulkan adapter ({}): wgpool reads the budget through \
                     VK_EXT_memory_budget only",
                    backend.to_str()
                )),
            },
            binding_limits: BindingLimits::new(limits),
        }
    }
}

fn no_page_mapping(why: NoPageMapping) -> Support {
    Support::no(format!("{}; pools use fixed segment buffers", why.reason))
}

/// A feature the pool uses: enabled, or missing from the adapter, or offered by the adapter
/// but not enabled on the device.
fn feature(
    enabled: wgpu::Features,
    offered: wgpu::Features,
    wanted: wgpu::Features,
    name: &str,
    without: &str,
) -> Support {
    if enabled.contains(wanted) {
        Support::yes(name)
    } else if offered.contains(wanted) {
        Support::no(format!(
            "the device was opened without {name}, which the adapter has: {without}"
        ))
    } else {
        Support::no(format!("the adapter lacks {name}: {without}"))
    }
}

fn timestamps(enabled: wgpu::Features, offered: wgpu::Features) -> Support {
    let passes = feature(
        enabled,
        offered,
        wgpu::Features::TIMESTAMP_QUERY,
        "TIMESTAMP_QUERY",
        "wgpool bench times kernels and copies by wall clock",
    );
    if !passes.is_available() {
        return passes;
    }
    if enabled.contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS) {
        Support::yes("TIMESTAMP_QUERY and TIMESTAMP_QUERY_INSIDE_ENCODERS (passes and copies)")
    } else {
        Support::yes(
            "TIMESTAMP_QUERY (passes; copies are timed by wall clock without \
             TIMESTAMP_QUERY_INSIDE_ENCODERS)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn support_serializes_availability_with_its_text() {
        let yes = serde_json::to_value(Support::yes("SHADER_F16")).unwrap();
        assert_eq!(
            yes,
            serde_json::json!({"available": true, "via": "SHADER_F16"})
        );
        let no = serde_json::to_value(Support::no("no GL path")).unwrap();
        assert_eq!(
            no,
            serde_json::json!({"available": false, "reason": "no GL path"})
        );
    }

    #[test]
    fn a_feature_is_missing_from_the_adapter_or_only_from_the_device() {
        let f16 = wgpu::Features::SHADER_F16;
        let none = wgpu::Features::empty();
        assert!(feature(f16, f16, f16, "SHADER_F16", "x").is_available());
        let device_only = feature(none, f16, f16, "SHADER_F16", "no f16 kernels");
        assert_eq!(
            device_only.text(),
            "the device was opened without SHADER_F16, which the adapter has: no f16 kernels"
        );
        let adapter = feature(none, none, f16, "SHADER_F16", "no f16 kernels");
        assert_eq!(
            adapter.text(),
            "the adapter lacks SHADER_F16: no f16 kernels"
        );
    }

    #[test]
    fn timestamps_say_whether_copies_are_timed_on_the_gpu_too() {
        let passes = wgpu::Features::TIMESTAMP_QUERY;
        let both = passes | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        assert!(timestamps(both, both).text().contains("passes and copies"));
        assert!(
            timestamps(passes, both)
                .text()
                .contains("copies are timed by wall clock")
        );
        let none = timestamps(wgpu::Features::empty(), wgpu::Features::empty());
        assert!(!none.is_available());
        assert!(none.text().contains("wall clock"), "{}", none.text());
    }
}
