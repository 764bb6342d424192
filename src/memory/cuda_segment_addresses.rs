//! Segment addresses as the CUDA driver would give them, for a pool under `policy:pytorch`.
//!
//! PyTorch breaks ties between free blocks of equal size by device address, so which of two
//! equal cached blocks a request reuses depends on where `cudaMalloc` put each segment. The
//! engine orders free blocks by the addresses its source gives; `wgpool replay` gives it
//! those of [`CudaAddressModel`] under `policy:pytorch`. A GPU pool's buffers have no
//! address of their own, so a pool in fixed segments under `policy:pytorch` takes the same
//! model: its placement is then the replay's, block for block, and PyTorch's where the model
//! holds (see the model's documentation).

use std::collections::HashMap;

use crate::engine::CudaAddressModel;
use crate::engine::SegmentId;

/// The modelled address of every live segment of one pool.
#[derive(Debug)]
pub(crate) struct CudaSegmentAddresses {
    driver: CudaAddressModel,
    /// Live segments' addresses, by segment id.
    base_of: HashMap<u32, u64>,
}

impl CudaSegmentAddresses {
    /// A fresh process's addresses: only the CUDA context's reservation exists.
    pub fn new() -> CudaSegmentAddresses {
        CudaSegmentAddresses {
            driver: CudaAddressModel::new(),
            base_of: HashMap::new(),
        }
    }

    /// Where `cudaMalloc` of `size` bytes would put segment `id`, just created; `None`
    /// where the model has no room (the engine then numbers the segment itself).
    pub fn created(&mut self, id: SegmentId, size: u64) -> Option<u64> {
        let base = self.driver.allocate(size)?;
        self.base_of.insert(id.0, base);
        Some(base)
    }

    /// Segment `id` was released: `cudaFree` of its address.
    pub fn released(&mut self, id: SegmentId) {
        if let Some(base) = self.base_of.remove(&id.0) {
            self.driver.free(base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool's addresses are the model's, freed addresses are taken again as the model
    /// takes them, and a segment the model never placed is released without effect.
    #[test]
    fn segments_take_the_models_addresses_and_give_them_back() {
        let mut model = CudaAddressModel::new();
        let mut addresses = CudaSegmentAddresses::new();
        let sizes = [2u64 << 20, 20 << 20, 2 << 20, 64 << 20];
        for (i, &size) in sizes.iter().enumerate() {
            let expected = model.allocate(size);
            assert!(expected.is_some());
            assert_eq!(addresses.created(SegmentId(i as u32), size), expected);
        }
        let second = addresses.base_of[&1];
        model.free(second);
        addresses.released(SegmentId(1));
        assert!(!addresses.base_of.contains_key(&1));
        addresses.released(SegmentId(1));
        addresses.released(SegmentId(99));
        assert_eq!(
            addresses.created(SegmentId(4), 20 << 20),
            model.allocate(20 << 20)
        );
        assert_eq!(addresses.base_of.len(), sizes.len());
    }
}
