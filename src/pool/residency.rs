//! Where a block's memory is.

/// The memory a [`Block`](super::Block) lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Residency {
    /// Device memory, counted against the pool's cap.
    Device,
    /// Host memory: an overflow block or an offloaded one. Kernels can bind it (reading over
    /// PCIe) where the adapter has `MAPPABLE_PRIMARY_BUFFERS`; elsewhere it lives in staging
    /// memory and must be prefetched before it is bound.
    Host,
}
