//! How much of a device's sparse address space pools may reserve.
//!
//! Vulkan's `sparseAddressSpaceSize` bounds the sparse resources of a device together, and
//! pools count their ranges against it so that running out is a clear error
//! ([`SparseError::AddressSpace`](super::SparseError::AddressSpace)) instead of a driver's
//! failure. On NVIDIA's driver the figure is not a safe bound: on an H100 (driver
//! 580.159.04, which reports 1 TiB) `vkCreateBuffer` of sparse buffers already refuses past
//! about 885 GiB, less once memory is allocated (ranges and memory allocations share the GPU's
//! virtual addresses: 797 ranges of 1 GiB with a chunk each), and `vkAllocateMemory`
//! **crashes the process** (a segmentation fault inside the driver) instead of failing when
//! the ranges have left no room for the memory itself (228 pools of one 4 GiB range and one
//! chunk each). So on NVIDIA pools use half the figure: the rest stays for the device's
//! memory allocations (at most its heap, 80-141 GiB on an H100 or H200) with room to spare.

use ash::vk;

/// PCI vendor id of NVIDIA.
const NVIDIA: u32 = 0x10de;

/// The sparse address space pools on a device with `properties` may reserve: all of
/// `sparseAddressSpaceSize`, except on NVIDIA, where half of it (see the module's doc).
pub(crate) fn usable_address_space(properties: &vk::PhysicalDeviceProperties) -> u64 {
    let reported = properties.limits.sparse_address_space_size;
    if properties.vendor_id == NVIDIA {
        reported / 2
    } else {
        reported
    }
}

/// "512.00 GiB address space (of 1.00 TiB reported)", or "2.00 GiB address space" where
/// pools may use all the driver reports.
pub fn describe_address_space(usable: u64, reported: u64) -> String {
    use crate::format::bytes;
    if usable == reported {
        format!("{} address space", bytes(usable))
    } else {
        format!(
            "{} address space (of {} reported)",
            bytes(usable),
            bytes(reported)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties(vendor_id: u32, space: u64) -> vk::PhysicalDeviceProperties {
        let mut properties = vk::PhysicalDeviceProperties {
            vendor_id,
            ..Default::default()
        };
        properties.limits.sparse_address_space_size = space;
        properties
    }

    #[test]
    fn nvidia_keeps_half_of_its_address_space_for_memory_and_others_use_all() {
        const TIB: u64 = 1 << 40;
        assert_eq!(usable_address_space(&properties(NVIDIA, TIB)), TIB / 2);
        // lavapipe (vendor 0x10005) and AMD (0x1002) use what they report.
        assert_eq!(usable_address_space(&properties(0x10005, 2 << 30)), 2 << 30);
        assert_eq!(usable_address_space(&properties(0x1002, TIB)), TIB);
        assert_eq!(usable_address_space(&properties(NVIDIA, 0)), 0);
        assert_eq!(
            describe_address_space(TIB / 2, TIB),
            "512.00 GiB address space (of 1.00 TiB reported)"
        );
        assert_eq!(
            describe_address_space(2 << 30, 2 << 30),
            "2.00 GiB address space"
        );
    }
}
