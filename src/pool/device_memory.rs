//! The device memory size that `per_process_memory_fraction` applies to.

/// Total bytes of the device-local memory heaps behind `device`, read through wgpu-hal and
/// Vulkan. `None` on other backends, where wgpu has no way to ask (gfx-rs/wgpu#2447).
#[allow(unsafe_code)]
pub(crate) fn device_local_bytes(device: &wgpu::Device) -> Option<u64> {
    // SAFETY: the hal device is borrowed only for this call; nothing is created or destroyed
    // through it, and the query only reads properties of its own physical device.
    let hal = unsafe { device.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let instance = hal.shared_instance().raw_instance();
    // SAFETY: a Vulkan 1.0 query on the physical device the instance enumerated.
    let properties =
        unsafe { instance.get_physical_device_memory_properties(hal.raw_physical_device()) };
    let local: Vec<u64> = properties
        .memory_heaps_as_slice()
        .iter()
        .filter(|heap| heap.flags.contains(ash::vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|heap| heap.size)
        .collect();
    (!local.is_empty()).then(|| local.iter().sum())
}
