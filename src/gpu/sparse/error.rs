//! Errors of the page-mapping layer.

use ash::vk;

use crate::gpu::scope::CaughtError;

/// Why a device could not be opened with page mapping, or a page operation failed.
///
/// Every variant keeps the Vulkan result or wgpu error it came from.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SparseError {
    /// The adapter is not a Vulkan adapter (page mapping exists only on Vulkan).
    #[error(
        "adapter {adapter:?} is not a Vulkan adapter; page mapping needs Vulkan sparse binding"
    )]
    NotVulkan {
        /// The adapter's name.
        adapter: String,
    },
    /// A Vulkan call failed.
    #[error("{call} failed: {result}")]
    Vulkan {
        /// The Vulkan function that failed.
        call: &'static str,
        /// Its result code.
        #[source]
        result: vk::Result,
    },
    /// `vkAllocateMemory` refused: the device (or host) is out of memory.
    #[error("out of device memory: vkAllocateMemory of {bytes} bytes failed: {result}")]
    OutOfMemory {
        /// The size that was asked for.
        bytes: u64,
        /// `VK_ERROR_OUT_OF_DEVICE_MEMORY` or `VK_ERROR_OUT_OF_HOST_MEMORY`.
        #[source]
        result: vk::Result,
    },
    /// The sparse address space has no room for another range of this size.
    #[error(
        "the device's sparse address space is exhausted: a range of {} was asked for, and \
         ranges of pools in pages mode on the device hold {} of its {}",
        crate::format::bytes(*requested),
        crate::format::bytes(*in_use),
        crate::format::bytes(*total)
    )]
    AddressSpace {
        /// The range size that was asked for.
        requested: u64,
        /// Bytes of address space already reserved.
        in_use: u64,
        /// The address space pools may reserve ([`SparseFacts::address_space`](super::SparseFacts::address_space)).
        total: u64,
    },
    /// The driver refused a sparse range (`vkCreateBuffer` out of memory) although the
    /// address space pools count had room: the driver's own address space ran out first
    /// (its ranges and memory allocations share the GPU's virtual addresses).
    #[error(
        "the driver refused a sparse range of {} ({result}): its address space ran out \
         before the {} pools may reserve; ranges of pools in pages mode on the device hold {}",
        crate::format::bytes(*requested),
        crate::format::bytes(*total),
        crate::format::bytes(*in_use)
    )]
    RangeRefused {
        /// The range size that was asked for.
        requested: u64,
        /// Bytes of address space other ranges held.
        in_use: u64,
        /// The address space pools may reserve ([`SparseFacts::address_space`](super::SparseFacts::address_space)).
        total: u64,
        /// The driver's result.
        #[source]
        result: vk::Result,
    },
    /// wgpu-hal could not wrap the Vulkan device.
    #[error("wgpu-hal could not take the Vulkan device: {0}")]
    Hal(#[source] wgpu::hal::DeviceError),
    /// wgpu refused the device made from the Vulkan device.
    #[error("wgpu refused the device: {0}")]
    RequestDevice(#[source] wgpu::RequestDeviceError),
    /// wgpu refused a range's buffer: a usage the device does not support (say `BLAS_INPUT`
    /// without ray tracing), or an error while wrapping the Vulkan buffer. wgpu's own error
    /// is the source.
    #[error("wgpu refused the range's buffer: {0}")]
    Gpu(#[source] CaughtError),
    /// A page operation named a range, offset or size that is not valid.
    #[error("invalid page operation: {0}")]
    Invalid(String),
}

impl SparseError {
    /// A failed Vulkan call; allocation failures become [`SparseError::OutOfMemory`] only
    /// where the caller knows the size, so this keeps the call's name.
    pub(crate) fn vulkan(call: &'static str) -> impl FnOnce(vk::Result) -> SparseError {
        move |result| SparseError::Vulkan { call, result }
    }

    /// The Vulkan result to hand back from a Vulkan entry point that failed with this error
    /// (a gated `vkQueueSubmit`): the call's own where a call failed.
    pub(crate) fn vulkan_result(&self) -> vk::Result {
        match self {
            SparseError::Vulkan { result, .. } => *result,
            _ if self.is_out_of_memory() => vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            _ => vk::Result::ERROR_UNKNOWN,
        }
    }

    /// Whether the error means "no memory": the retry chain may help.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            SparseError::OutOfMemory { .. }
            | SparseError::AddressSpace { .. }
            | SparseError::RangeRefused { .. } => true,
            SparseError::Gpu(caught) => matches!(caught, CaughtError::OutOfMemory(_)),
            SparseError::Vulkan { result, .. } => matches!(
                *result,
                vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY
            ),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gated `vkQueueSubmit` whose queued maps could not be submitted returns the failed
    /// call's own result; other errors become out-of-memory where they mean that, else
    /// `VK_ERROR_UNKNOWN`.
    #[test]
    fn a_failed_submission_of_queued_maps_hands_wgpu_the_drivers_result() {
        let lost = SparseError::Vulkan {
            call: "vkQueueBindSparse",
            result: vk::Result::ERROR_DEVICE_LOST,
        };
        assert_eq!(lost.vulkan_result(), vk::Result::ERROR_DEVICE_LOST);
        let space = SparseError::AddressSpace {
            requested: 1,
            in_use: 1,
            total: 1,
        };
        assert_eq!(
            space.vulkan_result(),
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
        );
        let invalid = SparseError::Invalid("range 3 is not reserved".into());
        assert_eq!(invalid.vulkan_result(), vk::Result::ERROR_UNKNOWN);
    }
}
