//! The identifying facts of an adapter, in report form.

use serde::Serialize;

/// Name, backend, device type and driver of an adapter, as strings for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdapterSummary {
    /// The adapter's name (`NVIDIA H200`, `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// `vulkan`, `metal`, `dx12`, `gl`, ...
    pub backend: String,
    /// `discrete_gpu`, `integrated_gpu`, `virtual_gpu`, `cpu` or `other`.
    pub device_type: String,
    /// Driver name.
    pub driver: String,
    /// Driver version information.
    pub driver_info: String,
}

impl AdapterSummary {
    /// The summary of `info`.
    pub fn new(info: &wgpu::AdapterInfo) -> AdapterSummary {
        AdapterSummary {
            name: info.name.clone(),
            backend: info.backend.to_str().to_string(),
            device_type: device_type_name(info.device_type).to_string(),
            driver: info.driver.clone(),
            driver_info: info.driver_info.clone(),
        }
    }
}

/// The snake_case name of a device type.
pub fn device_type_name(device_type: wgpu::DeviceType) -> &'static str {
    match device_type {
        wgpu::DeviceType::DiscreteGpu => "discrete_gpu",
        wgpu::DeviceType::IntegratedGpu => "integrated_gpu",
        wgpu::DeviceType::VirtualGpu => "virtual_gpu",
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::Other => "other",
    }
}
