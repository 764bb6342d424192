//! Device memory heaps and budget, read from Vulkan (wgpu has no public API for them:
//! gfx-rs/wgpu#2447).

use ash::vk;
use serde::Serialize;

/// One Vulkan memory heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryHeap {
    /// Heap size in bytes, as the driver reports it.
    pub size: u64,
    /// `VK_MEMORY_HEAP_DEVICE_LOCAL_BIT`: memory the GPU reaches at full speed. Software
    /// devices (lavapipe) report their single host heap as device-local.
    pub device_local: bool,
    /// Some memory type on this heap is `HOST_VISIBLE` (CPU-mappable; on a discrete GPU a
    /// device-local, host-visible heap is the BAR window).
    pub host_visible: bool,
    /// `VK_EXT_memory_budget`: how much of the heap this process may use before the driver
    /// starts failing or paging. `None` when the extension is not available.
    pub budget: Option<u64>,
    /// `VK_EXT_memory_budget`: how much of the heap this process uses now. `None` when the
    /// extension is not available.
    pub usage: Option<u64>,
}

/// The memory heaps of a Vulkan physical device and, where the driver reports them, the
/// per-heap budget and usage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceMemoryInfo {
    /// Every heap, in Vulkan's heap order.
    pub heaps: Vec<MemoryHeap>,
    /// Whether `VK_EXT_memory_budget` was usable, so that `budget` and `usage` are `Some`.
    pub budget_supported: bool,
}

impl DeviceMemoryInfo {
    /// Reads the heaps of the adapter's physical device. Returns `None` when the adapter is
    /// not a Vulkan adapter. The values are a snapshot: usage and budget change as memory is
    /// allocated anywhere on the system.
    pub fn query(adapter: &wgpu::Adapter) -> Option<DeviceMemoryInfo> {
        // SAFETY: the hal adapter is only borrowed for the duration of this call and nothing is
        // created or destroyed through it; the Vulkan calls below only read properties of the
        // physical device that the adapter owns.
        let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
        let capabilities = hal.physical_device_capabilities();
        let has_budget_extension = capabilities.supports_extension(ash::ext::memory_budget::NAME);
        Some(Self::read(
            hal.shared_instance(),
            hal.raw_physical_device(),
            capabilities.properties().api_version,
            has_budget_extension,
        ))
    }

    /// Reads the heaps of the physical device behind `device`, without budget and usage
    /// (the device's own extensions are not known here). Returns `None` when the device is
    /// not a Vulkan device.
    pub(crate) fn query_device(device: &wgpu::Device) -> Option<DeviceMemoryInfo> {
        // SAFETY: the hal device is borrowed only for this call; nothing is created or
        // destroyed through it, and the query only reads properties of its own physical
        // device.
        let hal = unsafe { device.as_hal::<wgpu::hal::api::Vulkan>() }?;
        Some(Self::read(
            hal.shared_instance(),
            hal.raw_physical_device(),
            vk::API_VERSION_1_0,
            false,
        ))
    }

    /// The one raw Vulkan query of a physical device's heaps: with budget and usage where
    /// the device has `VK_EXT_memory_budget` (`has_budget_extension`) and the instance can
    /// chain the query (Vulkan 1.1 on both, per `device_api`, or
    /// `VK_KHR_get_physical_device_properties2`), else the Vulkan 1.0 query.
    fn read(
        shared: &wgpu::hal::vulkan::InstanceShared,
        physical_device: vk::PhysicalDevice,
        device_api: u32,
        has_budget_extension: bool,
    ) -> DeviceMemoryInfo {
        let instance = shared.raw_instance();
        let khr_properties2 = shared
            .extensions()
            .contains(&ash::khr::get_physical_device_properties2::NAME);
        let core_properties2 = shared.instance_api_version() >= vk::API_VERSION_1_1
            && device_api >= vk::API_VERSION_1_1;

        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let (properties, budget_supported) = if has_budget_extension && khr_properties2 {
            let loader =
                ash::khr::get_physical_device_properties2::Instance::new(shared.entry(), instance);
            let mut properties2 =
                vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
            // SAFETY: the physical device belongs to this instance, which enabled
            // VK_KHR_get_physical_device_properties2; the device supports
            // VK_EXT_memory_budget, so the chained structure is valid.
            unsafe {
                loader.get_physical_device_memory_properties2(physical_device, &mut properties2)
            };
            (properties2.memory_properties, true)
        } else if has_budget_extension && core_properties2 {
            let mut properties2 =
                vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
            // SAFETY: instance and physical device are Vulkan 1.1 or newer, so the core
            // function exists; the device supports VK_EXT_memory_budget.
            unsafe {
                instance.get_physical_device_memory_properties2(physical_device, &mut properties2)
            };
            (properties2.memory_properties, true)
        } else {
            // SAFETY: a Vulkan 1.0 query on the instance's own physical device.
            let properties =
                unsafe { instance.get_physical_device_memory_properties(physical_device) };
            (properties, false)
        };
        Self::from_properties(&properties, budget_supported.then_some(&budget))
    }

    /// Builds the report from raw Vulkan memory properties (and budget, when present).
    fn from_properties(
        properties: &vk::PhysicalDeviceMemoryProperties,
        budget: Option<&vk::PhysicalDeviceMemoryBudgetPropertiesEXT<'_>>,
    ) -> DeviceMemoryInfo {
        let types = properties.memory_types_as_slice();
        let heaps = properties
            .memory_heaps_as_slice()
            .iter()
            .enumerate()
            .map(|(index, heap)| MemoryHeap {
                size: heap.size,
                device_local: heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
                host_visible: types.iter().any(|t| {
                    t.heap_index as usize == index
                        && t.property_flags
                            .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
                }),
                budget: budget.map(|b| b.heap_budget[index]),
                usage: budget.map(|b| b.heap_usage[index]),
            })
            .collect();
        DeviceMemoryInfo {
            heaps,
            budget_supported: budget.is_some(),
        }
    }

    /// Total size of the device-local heaps, or `None` when there is none. This is the
    /// "device memory" that `per_process_memory_fraction` is a fraction of.
    ///
    /// ```
    /// use wgpool::gpu::{DeviceMemoryInfo, MemoryHeap};
    /// let heap = |size, device_local| MemoryHeap {
    ///     size, device_local, host_visible: !device_local, budget: None, usage: None,
    /// };
    /// let info = DeviceMemoryInfo {
    ///     heaps: vec![heap(80 << 30, true), heap(64 << 30, false), heap(256 << 20, true)],
    ///     budget_supported: false,
    /// };
    /// assert_eq!(info.device_local_bytes(), Some((80 << 30) + (256 << 20)));
    /// ```
    pub fn device_local_bytes(&self) -> Option<u64> {
        let local = self.heaps.iter().filter(|h| h.device_local);
        local.clone().next()?;
        Some(local.map(|h| h.size).sum())
    }

    /// Total budget of the device-local heaps, when the driver reports a budget and there is
    /// a device-local heap.
    pub fn device_local_budget(&self) -> Option<u64> {
        let local: Vec<_> = self.heaps.iter().filter(|h| h.device_local).collect();
        if local.is_empty() {
            return None;
        }
        local.iter().map(|h| h.budget).sum()
    }
}
