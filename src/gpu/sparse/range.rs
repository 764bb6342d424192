//! An address range: one sparse `VkBuffer` with no memory of its own, wrapped as a
//! `wgpu::Buffer` so that kernels, copies and bind groups use it like any buffer.

use std::sync::Arc;

use ash::vk;
use wgpu::hal::api::Vulkan;

use super::device::SparseDevice;
use super::error::SparseError;
use crate::gpu::scope::catch;

/// A sparse buffer and its wgpu wrapper. Pages are bound into it by the pool; reading or
/// writing an unbound page is undefined (never done by the pool: blocks lie on mapped pages).
///
/// Dropping it destroys the wgpu buffer; wgpu destroys the `VkBuffer` once the last
/// submission that used it has finished.
pub(crate) struct SparseRange {
    raw: Arc<RawSparseBuffer>,
    size: u64,
    usage: wgpu::BufferUsages,
    buffer: wgpu::Buffer,
    aliases: Vec<wgpu::Buffer>,
}

/// The Vulkan buffer, destroyed when the last wgpu wrapper of it is dropped by wgpu and no
/// [`RetiringRange`] holds it.
struct RawSparseBuffer {
    device: ash::Device,
    raw: vk::Buffer,
}

impl Drop for RawSparseBuffer {
    fn drop(&mut self) {
        // SAFETY: every wgpu wrapper holds a reference, and wgpu drops a wrapper only after
        // the last submission that used it finished: nothing uses the buffer any more.
        unsafe { self.device.destroy_buffer(self.raw, None) };
    }
}

/// A wgpu buffer over `raw`, keeping it alive until wgpu drops the wrapper.
fn wrap(
    raw: &Arc<RawSparseBuffer>,
    device: &wgpu::Device,
    size: u64,
    usage: wgpu::BufferUsages,
    label: &str,
) -> wgpu::Buffer {
    let keep = raw.clone();
    let release: wgpu::hal::DropCallback = Box::new(move || drop(keep));
    // SAFETY: the Vulkan buffer outlives the hal buffer: the callback holds a reference
    // until wgpu drops the hal buffer. wgpu never maps it (no MAP usage).
    let hal_buffer =
        unsafe { wgpu::hal::vulkan::Buffer::from_raw_externally_owned(raw.raw, release) };
    let descriptor = wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage,
        mapped_at_creation: false,
    };
    // SAFETY: the hal buffer was created on this device with the Vulkan usages that `usage`
    // needs, has a non-zero size, and needs no initialization (the pool hands out
    // uninitialized memory, as it does from segments).
    unsafe { device.create_buffer_from_hal::<Vulkan>(hal_buffer, &descriptor) }
}

/// A released range's Vulkan buffer, kept until the binds into it have been applied
/// (its wgpu wrappers are gone). Dropping it gives the buffer up.
pub(crate) struct RetiringRange {
    _raw: Arc<RawSparseBuffer>,
    size: u64,
}

impl RetiringRange {
    /// The range's size in bytes: the address space it holds.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl SparseRange {
    /// A range of `size` bytes (a multiple of the page size) with `usage`.
    pub fn new(
        sparse: &SparseDevice,
        device: &wgpu::Device,
        size: u64,
        usage: wgpu::BufferUsages,
        label: &str,
    ) -> Result<SparseRange, SparseError> {
        let page = sparse.page_size();
        // The wrapper is a wgpu buffer: wgpu's limit applies beside Vulkan's.
        let largest = sparse
            .facts()
            .max_range_size
            .min(device.limits().max_buffer_size);
        if size == 0 || size % page != 0 || size > largest {
            return Err(SparseError::Invalid(format!(
                "a range of {size} bytes: it must be a non-zero multiple of the {page} B page \
                 and at most {largest} bytes"
            )));
        }
        let raw_device = sparse.raw();
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vulkan_usage(usage))
            .flags(vk::BufferCreateFlags::SPARSE_BINDING | vk::BufferCreateFlags::SPARSE_RESIDENCY)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a sparse buffer on a device opened with sparse binding and residency.
        let raw =
            unsafe { raw_device.create_buffer(&info, None) }.map_err(|result| match result {
                vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                    SparseError::OutOfMemory {
                        bytes: size,
                        result,
                    }
                }
                _ => SparseError::Vulkan {
                    call: "vkCreateBuffer (sparse)",
                    result,
                },
            })?;
        // SAFETY: `raw` is live.
        let requirements = unsafe { raw_device.get_buffer_memory_requirements(raw) };
        let facts = sparse.facts();
        if requirements.alignment > page
            || page % requirements.alignment.max(1) != 0
            || requirements.memory_type_bits & (1 << facts.memory_type) == 0
        {
            // SAFETY: nothing else knows of `raw`.
            unsafe { raw_device.destroy_buffer(raw, None) };
            return Err(SparseError::Invalid(format!(
                "a sparse buffer with usage {usage:?} needs {} B pages in memory types {:#x}; \
                 the device was probed with {page} B pages in type {}",
                requirements.alignment, requirements.memory_type_bits, facts.memory_type
            )));
        }
        let raw = Arc::new(RawSparseBuffer {
            device: raw_device.clone(),
            raw,
        });
        // Errors wgpu raises while wrapping (its own bind groups for indirect validation and
        // timestamp normalization) come back as errors, not to the uncaptured handler. On
        // failure the invalid wrapper drops its hold on `raw`, and `raw` destroys the buffer.
        let buffer =
            catch(device, || wrap(&raw, device, size, usage, label)).map_err(SparseError::Gpu)?;
        Ok(SparseRange {
            raw,
            size,
            usage,
            buffer,
            aliases: Vec::new(),
        })
    }

    /// Another wgpu buffer over the same Vulkan buffer. wgpu tracks it apart from the
    /// range's own buffer: dispatches on different wrappers get no barrier between them, and
    /// nothing orders accesses to the same bytes through different wrappers.
    pub fn alias(&mut self, device: &wgpu::Device, label: &str) -> wgpu::Buffer {
        let buffer = wrap(&self.raw, device, self.size, self.usage, label);
        self.aliases.push(buffer.clone());
        buffer
    }

    /// The wgpu buffer over the whole range.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The Vulkan buffer, for binds.
    pub fn raw(&self) -> vk::Buffer {
        self.raw.raw
    }

    /// The range's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Destroys the wgpu wrappers (wgpu keeps them until the work that used them has
    /// finished) and returns what keeps the Vulkan buffer alive for pending binds.
    pub fn retire(self) -> RetiringRange {
        RetiringRange {
            _raw: self.raw.clone(),
            size: self.size,
        }
    }
}

impl Drop for SparseRange {
    fn drop(&mut self) {
        // wgpu refuses any further use of the wrappers and drops their hal buffers after the
        // submissions that used them; the last one destroys the VkBuffer.
        self.buffer.destroy();
        for alias in &self.aliases {
            alias.destroy();
        }
    }
}

/// Whether wgpu accepts buffers of `usage` on `device`, as `create_buffer` judges them.
///
/// A range's buffer reaches wgpu through `create_buffer_from_hal`, which does not validate
/// usages: a usage that needs a feature the device lacks (`BLAS_INPUT` without ray tracing)
/// would be accepted there and fail later. So a buffer of `size` bytes (one page) with the
/// same usage is created under error scopes and destroyed at once; wgpu's refusal comes back
/// as [`SparseError::Gpu`] with wgpu's error inside.
pub(crate) fn check_usage(
    device: &wgpu::Device,
    usage: wgpu::BufferUsages,
    size: u64,
) -> Result<(), SparseError> {
    let probe = catch(device, || {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpool range usage check"),
            size,
            usage,
            mapped_at_creation: false,
        })
    })
    .map_err(SparseError::Gpu)?;
    probe.destroy();
    Ok(())
}

/// The Vulkan usages a range needs for wgpu `usage`, including what wgpu adds internally
/// (indirect validation and timestamp normalization read such buffers as storage).
pub(crate) fn vulkan_usage(usage: wgpu::BufferUsages) -> vk::BufferUsageFlags {
    use wgpu::BufferUsages as U;
    let mut flags = vk::BufferUsageFlags::TRANSFER_DST;
    let pairs = [
        (U::COPY_SRC, vk::BufferUsageFlags::TRANSFER_SRC),
        (U::UNIFORM, vk::BufferUsageFlags::UNIFORM_BUFFER),
        (U::STORAGE, vk::BufferUsageFlags::STORAGE_BUFFER),
        (U::INDEX, vk::BufferUsageFlags::INDEX_BUFFER),
        (U::VERTEX, vk::BufferUsageFlags::VERTEX_BUFFER),
        (
            U::INDIRECT,
            vk::BufferUsageFlags::from_raw(
                vk::BufferUsageFlags::INDIRECT_BUFFER.as_raw()
                    | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
            ),
        ),
        (U::QUERY_RESOLVE, vk::BufferUsageFlags::STORAGE_BUFFER),
    ];
    for (wgpu_usage, vulkan) in pairs {
        if usage.contains(wgpu_usage) {
            flags |= vulkan;
        }
    }
    flags
}
