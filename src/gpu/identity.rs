//! Device identity: whether two `wgpu::Device` handles name the same device.
//!
//! wgpu compares devices by the id its core gave them, and every `wgpu::Instance` numbers
//! its devices from the start: the first device of one instance compares equal to the first
//! device of another. Pools, kernels and staging pools must never take a device's blocks for
//! another's (wgpu would then look the buffer up among the wrong device's resources), so they
//! compare a [`DeviceKey`]: wgpu's id together with the address of the backend's device
//! object, which is unique while the device lives.

/// What identifies a live device: wgpu's id (through `wgpu::Device`'s equality) and, on
/// Vulkan and GL, the address of the backend's device object.
#[derive(Debug, Clone)]
pub(crate) struct DeviceKey {
    device: wgpu::Device,
    backend_object: Option<usize>,
}

impl DeviceKey {
    /// The key of `device`.
    pub fn of(device: &wgpu::Device) -> DeviceKey {
        DeviceKey {
            device: device.clone(),
            backend_object: backend_object(device),
        }
    }

    /// Whether `device` is the device of this key.
    pub fn matches(&self, device: &wgpu::Device) -> bool {
        self.device == *device && self.backend_object == backend_object(device)
    }
}

impl PartialEq for DeviceKey {
    fn eq(&self, other: &DeviceKey) -> bool {
        self.device == other.device && self.backend_object == other.backend_object
    }
}

impl Eq for DeviceKey {}

/// Whether `a` and `b` are the same device, also when they come from different
/// `wgpu::Instance`s (where `a == b` can hold for two devices).
///
/// ```no_run
/// use wgpool::gpu::{GpuContext, HeadlessOptions, same_device};
/// let first = GpuContext::headless(&HeadlessOptions::default())?;
/// let second = GpuContext::headless(&HeadlessOptions::default())?;
/// assert!(same_device(first.device(), &first.device().clone()));
/// assert!(!same_device(first.device(), second.device()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn same_device(a: &wgpu::Device, b: &wgpu::Device) -> bool {
    DeviceKey::of(a).matches(b)
}

/// The address of the backend's device object behind `device`, on Vulkan and GL.
#[allow(unsafe_code)]
fn backend_object(device: &wgpu::Device) -> Option<usize> {
    // SAFETY (both): the hal device is only borrowed to read its address; nothing is called
    // on it, and the guard is dropped before returning.
    if let Some(hal) = unsafe { device.as_hal::<wgpu::hal::api::Vulkan>() } {
        return Some(&*hal as *const wgpu::hal::vulkan::Device as usize);
    }
    if let Some(hal) = unsafe { device.as_hal::<wgpu::hal::api::Gles>() } {
        return Some(&*hal as *const wgpu::hal::gles::Device as usize);
    }
    None
}
