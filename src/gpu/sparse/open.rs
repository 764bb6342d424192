//! Opening a wgpu device with Vulkan sparse binding enabled.
//!
//! wgpu's own `request_device` enables only the core features wgpu needs, and
//! `open_with_callback` overwrites the core features it is handed, so sparse binding can
//! only be turned on by creating the `VkDevice` here, with wgpu-hal's own extension list and
//! feature chain plus `sparseBinding` and `sparseResidencyBuffer`, and handing it to
//! `device_from_raw` and `create_device_from_hal`.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use ash::vk;
use wgpu::hal::api::Vulkan;

use super::address_space::usable_address_space;
use super::device::{Registered, SparseDevice, SparseDeviceInner, SparseFacts};
use super::error::SparseError;
use super::gate::{self, QueueGate, RealQueueFns};
use super::timeline::Timelines;

/// Every buffer usage a pool range may carry: the page size is read for all of them.
pub(crate) const ALL_BUFFER_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::UNIFORM_BUFFER.as_raw()
        | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::INDEX_BUFFER.as_raw()
        | vk::BufferUsageFlags::VERTEX_BUFFER.as_raw()
        | vk::BufferUsageFlags::INDIRECT_BUFFER.as_raw(),
);

/// Opens a device and queue on `adapter` as `adapter.request_device(desc)` would, with
/// Vulkan sparse binding enabled where the adapter has it, so that pools on the device can
/// map pages ([`sparse_device`](super::sparse_device) then returns `Ok`).
///
/// - On a Vulkan adapter with `sparseBinding` and `sparseResidencyBuffer` whose first queue
///   family (the one wgpu uses) can bind sparse memory, the device gets sparse binding. Where
///   that family has two queues or more, wgpu gets queue 0 and pools bind on queue 1, a queue
///   of their own. Where it has one (lavapipe), pools bind on wgpu's queue, and every
///   submission wgpu makes on it is serialized with the binds (see the `gate` module docs).
/// - Anywhere else (another backend, a Vulkan device without sparse binding) the device is
///   opened by `adapter.request_device(desc)` unchanged; pools on it use fixed segments, and
///   [`sparse_device`](super::sparse_device) says why.
///
/// Errors are wgpu's `request_device` errors (features or limits the adapter lacks) and
/// Vulkan failures while creating the device.
///
/// ```no_run
/// let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
/// let adapter = pollster::block_on(instance.request_adapter(&Default::default()))?;
/// let (device, queue) = wgpool::gpu::sparse::request_device(&adapter, &wgpu::DeviceDescriptor {
///     required_limits: adapter.limits(),
///     ..Default::default()
/// })?;
/// match wgpool::gpu::sparse::sparse_device(&device) {
///     Ok(sparse) => println!("pages of {} bytes", sparse.page_size()),
///     Err(why) => println!("fixed segments: {why}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn request_device(
    adapter: &wgpu::Adapter,
    desc: &wgpu::DeviceDescriptor<'_>,
) -> Result<(wgpu::Device, wgpu::Queue), SparseError> {
    let plain = |reason: String| -> Result<(wgpu::Device, wgpu::Queue), SparseError> {
        let (device, queue) =
            pollster::block_on(adapter.request_device(desc)).map_err(SparseError::RequestDevice)?;
        if let Some(handle) = vulkan_handle(&device) {
            super::device::register(handle, Registered::Plain(reason));
        }
        Ok((device, queue))
    };
    if !adapter.features().contains(desc.required_features)
        || !desc.required_limits.check_limits(&adapter.limits())
    {
        // wgpu's own path reports exactly what is missing.
        return plain(String::new());
    }
    // SAFETY: the hal adapter is used only within this function, to read properties and to
    // create a device from its own physical device.
    let Some(hal_adapter) = (unsafe { adapter.as_hal::<Vulkan>() }) else {
        return plain("not a Vulkan device; page mapping needs Vulkan sparse binding".into());
    };
    let support = match adapter_support(&hal_adapter) {
        Ok(support) => support,
        Err(reason) => {
            drop(hal_adapter);
            return plain(reason);
        }
    };
    let shared = hal_adapter.shared_instance();
    let instance = shared.raw_instance().clone();
    let physical_device = hal_adapter.raw_physical_device();
    // SAFETY: a query on the instance's own physical device.
    let memory = unsafe { instance.get_physical_device_memory_properties(physical_device) };
    let queue_count: u32 = if support.own_bind_queue { 2 } else { 1 };
    let properties = hal_adapter.physical_device_capabilities().properties();
    let api_1_1 = shared.instance_api_version() >= vk::API_VERSION_1_1
        && properties.api_version >= vk::API_VERSION_1_1;
    // wgpu-hal enables timeline semaphores wherever the device has them (its fences are
    // timelines); the pool uses them on Vulkan 1.2 devices, where they are core.
    let timeline_semaphores = api_1_1
        && properties.api_version >= vk::API_VERSION_1_2
        && has_timeline_semaphores(&instance, physical_device);

    let features = desc.required_features;
    let extensions = hal_adapter.required_device_extensions(features);
    let mut feature_chain = hal_adapter.physical_device_features(&extensions, features);
    let mut core = feature_chain.get_core();
    core.sparse_binding = vk::TRUE;
    core.sparse_residency_buffer = vk::TRUE;
    let priorities = [1.0f32; 2];
    let queue_info = vk::DeviceQueueCreateInfo::default()
        .queue_family_index(0)
        .queue_priorities(&priorities[..queue_count as usize]);
    let extension_names: Vec<*const c_char> = extensions.iter().map(|e| e.as_ptr()).collect();
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(std::slice::from_ref(&queue_info))
        .enabled_extension_names(&extension_names);
    let info = feature_chain
        .add_to_device_create(info)
        .enabled_features(&core);
    // SAFETY: the create info names extensions and features the physical device supports
    // (wgpu-hal's own selection for `features`, plus two core features checked above).
    let raw = unsafe { instance.create_device(physical_device, &info, None) }
        .map_err(SparseError::vulkan("vkCreateDevice"))?;
    let handle = raw.handle();

    let real_fns = RealQueueFns {
        queue_submit: raw.fp_v1_0().queue_submit,
        queue_submit2: raw.fp_v1_3().queue_submit2,
        queue_wait_idle: raw.fp_v1_0().queue_wait_idle,
        device_wait_idle: raw.fp_v1_0().device_wait_idle,
    };
    // SAFETY: the queues were requested in the create info above.
    let wgpu_queue = unsafe { raw.get_device_queue(0, 0) };
    // wgpu's queue always goes through a gate: its submissions submit the maps pools queued
    // first. With one queue that gate also serializes them with the binds; with two, the
    // bind queue has a gate of its own.
    let wgpu_gate = gate::register(handle, wgpu_queue, real_fns);
    let bind_queue_and_gate = if queue_count == 2 {
        // SAFETY: as above.
        let bind_queue = unsafe { raw.get_device_queue(0, 1) };
        (
            bind_queue,
            QueueGate::own_queue(handle, bind_queue, real_fns),
        )
    } else {
        (wgpu_queue, wgpu_gate.clone())
    };
    let (bind_queue, queue_gate) = bind_queue_and_gate;
    let get_proc = instance.fp_v1_0().get_device_proc_addr;
    // SAFETY: every entry point is the driver's own, except the queue entry points, which
    // are replaced by gated functions with identical signatures that call the driver's
    // after taking the queue's lock. A function the driver lacks stays null.
    let wgpu_table = unsafe {
        ash::Device::load_with(
            |name| {
                let real: *const c_void = match get_proc(handle, name.as_ptr()) {
                    Some(f) => f as *const c_void,
                    None => std::ptr::null(),
                };
                match gate::gated_entry_point(name) {
                    Some(gated) if !real.is_null() => gated,
                    _ => real,
                }
            },
            handle,
        )
    };

    let probe = probe_pages(&raw, &memory);
    let (page_size, memory_type) = match probe {
        Ok(found) => found,
        Err(error) => {
            gate::unregister(handle);
            // SAFETY: nothing was created on the device yet besides what probe_pages freed.
            unsafe { raw.destroy_device(None) };
            return Err(error);
        }
    };
    let heap_index = memory.memory_types[memory_type as usize].heap_index;
    let address_space = usable_address_space(&properties);
    let max_range_size =
        max_buffer_size(&instance, physical_device, properties.api_version, api_1_1)
            .min(address_space)
            / page_size
            * page_size;
    let facts = SparseFacts {
        page_size,
        address_space,
        reported_address_space: properties.limits.sparse_address_space_size,
        max_range_size,
        own_queue: queue_count == 2,
        memory_type,
        heap_size: memory.memory_heaps[heap_index as usize].size,
        heap_index,
        memory_budget: api_1_1 && extensions.contains(&ash::ext::memory_budget::NAME),
    };

    let destroy_with = raw.clone();
    let on_drop: wgpu::hal::DropCallback = Box::new(move || {
        super::device::unregister(handle);
        gate::unregister(handle);
        // SAFETY: wgpu-hal calls this once, after it dropped everything it made on the
        // device; pools keep the wgpu device alive, so none is left either.
        unsafe { destroy_with.destroy_device(None) };
    });
    // SAFETY: the device was created from this adapter with wgpu-hal's extension list and
    // feature chain for `features` (plus two core features), in queue family 0, whose queue
    // 0 wgpu gets.
    let open = unsafe {
        hal_adapter.device_from_raw(
            wgpu_table,
            Some(on_drop),
            &extensions,
            features,
            &desc.required_limits,
            &desc.memory_hints,
            0,
            0,
        )
    }
    .map_err(SparseError::Hal)?;
    drop(hal_adapter);
    // SAFETY: `open` was made from this adapter's hal adapter, with exactly `desc`'s features.
    let (device, queue) = unsafe { adapter.create_device_from_hal::<Vulkan>(open, desc) }
        .map_err(SparseError::RequestDevice)?;
    let timelines = if timeline_semaphores {
        // Without them, binds wait on fences instead: slower, still correct.
        Timelines::new(&raw).ok()
    } else {
        None
    };
    let sparse = SparseDevice {
        inner: Arc::new(SparseDeviceInner::new(
            raw,
            instance,
            physical_device,
            bind_queue,
            queue_gate,
            facts,
            timelines,
        )),
    };
    wgpu_gate.attach(&sparse);
    super::device::register(handle, Registered::Sparse(sparse));
    Ok((device, queue))
}

/// The page mapping of `device`, or why it has none: not opened by [`request_device`], not
/// Vulkan, or no sparse binding on the adapter.
pub fn sparse_device(device: &wgpu::Device) -> Result<SparseDevice, NoPageMapping> {
    let handle = vulkan_handle(device).ok_or_else(|| NoPageMapping {
        reason: "not a Vulkan device; page mapping needs Vulkan sparse binding".into(),
    })?;
    super::device::lookup(handle).map_err(|reason| NoPageMapping { reason })
}

/// What an adapter offers for page mapping, before any device is opened on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct AdapterPageMapping {
    /// The sparse address space pools on the device may reserve: `sparseAddressSpaceSize`,
    /// or half of it on NVIDIA, whose driver fails (and may crash) before the figure it
    /// reports is used up.
    pub address_space: u64,
    /// `sparseAddressSpaceSize` as the driver reports it.
    #[serde(skip)]
    pub reported_address_space: u64,
    /// Whether wgpu's queue family has a second queue for pools to bind on; without one,
    /// binds share wgpu's queue and are serialized with its submissions.
    pub own_bind_queue: bool,
    /// `sparseResidencyAliased`.
    pub aliased: bool,
}

/// Whether devices that [`request_device`] opens on `adapter` can map pages, and what the
/// adapter offers; or why not. Opens no device (the page size is known only once one is:
/// see [`SparseDevice::page_size`]).
pub fn adapter_page_mapping(adapter: &wgpu::Adapter) -> Result<AdapterPageMapping, NoPageMapping> {
    // SAFETY: the hal adapter is borrowed for property queries only.
    let Some(hal_adapter) = (unsafe { adapter.as_hal::<Vulkan>() }) else {
        return Err(NoPageMapping {
            reason: "not a Vulkan adapter; page mapping needs Vulkan sparse binding".into(),
        });
    };
    adapter_support(&hal_adapter).map_err(|reason| NoPageMapping { reason })
}

/// The sparse binding checks shared by [`request_device`] and [`adapter_page_mapping`].
fn adapter_support(hal_adapter: &wgpu::hal::vulkan::Adapter) -> Result<AdapterPageMapping, String> {
    let instance = hal_adapter.shared_instance().raw_instance();
    let physical_device = hal_adapter.raw_physical_device();
    // SAFETY: queries on the instance's own physical device.
    let (supported, families) = unsafe {
        (
            instance.get_physical_device_features(physical_device),
            instance.get_physical_device_queue_family_properties(physical_device),
        )
    };
    if supported.sparse_binding == vk::FALSE || supported.sparse_residency_buffer == vk::FALSE {
        return Err(
            "the adapter lacks sparseBinding or sparseResidencyBuffer (Mesa lavapipe \
                    has them from Mesa 25; on Debian 12 run scripts/setup-vulkan)"
                .into(),
        );
    }
    let family = families
        .first()
        .filter(|f| f.queue_flags.contains(vk::QueueFlags::SPARSE_BINDING))
        .ok_or("wgpu's queue family (0) cannot bind sparse memory")?;
    let properties = hal_adapter.physical_device_capabilities().properties();
    Ok(AdapterPageMapping {
        address_space: usable_address_space(&properties),
        reported_address_space: properties.limits.sparse_address_space_size,
        own_bind_queue: family.queue_count >= 2,
        aliased: supported.sparse_residency_aliased == vk::TRUE,
    })
}

/// Why a device cannot map pages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
#[non_exhaustive]
pub struct NoPageMapping {
    /// The reason, in words.
    pub reason: String,
}

fn vulkan_handle(device: &wgpu::Device) -> Option<vk::Device> {
    // SAFETY: only the handle is read.
    let hal = unsafe { device.as_hal::<Vulkan>() }?;
    Some(hal.raw_device().handle())
}

/// The page size (a sparse buffer's memory alignment) and the memory type to back pages
/// with: a device-local type the buffer accepts.
fn probe_pages(
    raw: &ash::Device,
    memory: &vk::PhysicalDeviceMemoryProperties,
) -> Result<(u64, u32), SparseError> {
    let info = vk::BufferCreateInfo::default()
        .size(64 << 20)
        .usage(ALL_BUFFER_USAGE)
        .flags(vk::BufferCreateFlags::SPARSE_BINDING | vk::BufferCreateFlags::SPARSE_RESIDENCY)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: a sparse buffer on a device with sparse binding enabled; destroyed below.
    let buffer = unsafe { raw.create_buffer(&info, None) }
        .map_err(SparseError::vulkan("vkCreateBuffer (sparse)"))?;
    // SAFETY: the buffer is live; it is destroyed once, right after the query.
    let requirements = unsafe {
        let r = raw.get_buffer_memory_requirements(buffer);
        raw.destroy_buffer(buffer, None);
        r
    };
    let memory_type =
        pick_memory_type(memory, requirements.memory_type_bits).ok_or(SparseError::Vulkan {
            call: "vkGetBufferMemoryRequirements (no memory type for sparse buffers)",
            result: vk::Result::ERROR_FEATURE_NOT_PRESENT,
        })?;
    Ok((requirements.alignment.max(1), memory_type))
}

/// The first device-local memory type among `bits`, else the first of `bits`.
pub(crate) fn pick_memory_type(
    memory: &vk::PhysicalDeviceMemoryProperties,
    bits: u32,
) -> Option<u32> {
    let allowed = |i: &u32| bits & (1 << i) != 0;
    let mut types = 0..memory.memory_type_count;
    types
        .clone()
        .filter(allowed)
        .find(|&i| {
            memory.memory_types[i as usize]
                .property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
        })
        .or_else(|| types.find(allowed))
}

/// Whether the physical device supports timeline semaphores (a 1.1+ instance and device).
fn has_timeline_semaphores(instance: &ash::Instance, physical_device: vk::PhysicalDevice) -> bool {
    let mut timeline = vk::PhysicalDeviceTimelineSemaphoreFeatures::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut timeline);
    // SAFETY: a Vulkan 1.1 query with a chained structure of Vulkan 1.2.
    unsafe { instance.get_physical_device_features2(physical_device, &mut features) };
    timeline.timeline_semaphore == vk::TRUE
}

/// `maxBufferSize` (Vulkan 1.3), or no limit on older devices.
fn max_buffer_size(
    instance: &ash::Instance,
    physical_device: vk::PhysicalDevice,
    api_version: u32,
    api_1_1: bool,
) -> u64 {
    if !api_1_1 || api_version < vk::API_VERSION_1_3 {
        return u64::MAX;
    }
    let mut maintenance4 = vk::PhysicalDeviceMaintenance4Properties::default();
    let mut properties = vk::PhysicalDeviceProperties2::default().push_next(&mut maintenance4);
    // SAFETY: a Vulkan 1.3 device on a 1.1+ instance: the core query and the chained
    // structure exist.
    unsafe { instance.get_physical_device_properties2(physical_device, &mut properties) };
    maintenance4.max_buffer_size
}
