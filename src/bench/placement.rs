//! Where benchmark operands are placed: the [`OperandPlacement`] trait, and dedicated buffers
//! (`raw`). Pool blocks are in [`pool_placement`](super::pool_placement).

use std::any::Any;

use crate::gpu::GpuContext;
use crate::gpu::scope::catch;
use crate::kernels::Operand;

use super::error::BenchError;

/// Usages every operand's buffer must have: kernels bind it (`STORAGE`), the benchmark
/// uploads inputs (`COPY_DST`) and reads results back (`COPY_SRC`): the pool's defaults.
pub const OPERAND_USAGES: wgpu::BufferUsages = crate::pool::DEFAULT_USAGE;

/// A byte range of a buffer that the benchmark owns a handle to.
#[derive(Clone, Debug)]
pub struct BufferRegion {
    /// The buffer (a cheap handle; clones refer to the same buffer).
    pub buffer: wgpu::Buffer,
    /// Start of the region in bytes; a multiple of the device's storage offset alignment.
    pub offset: u64,
    /// Length of the region in bytes.
    pub size: u64,
}

/// The operands of one kernel call, and whatever keeps them allocated.
///
/// Dropping the set releases them (for the real pool: the block handles return to the pool).
pub struct OperandSet {
    regions: Vec<BufferRegion>,
    _keep_alive: Box<dyn Any>,
}

impl OperandSet {
    /// A set of `regions`; `keep_alive` is dropped together with the set (pool block handles,
    /// or `()` when the regions' buffers are all that needs keeping).
    pub fn new(regions: Vec<BufferRegion>, keep_alive: Box<dyn Any>) -> OperandSet {
        OperandSet {
            regions,
            _keep_alive: keep_alive,
        }
    }

    /// Number of operands.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The regions, in allocation order.
    pub fn regions(&self) -> &[BufferRegion] {
        &self.regions
    }

    /// Operand `index` as a kernel operand. Panics if `index >= len()`.
    pub fn operand(&self, index: usize) -> Operand<'_> {
        let region = &self.regions[index];
        Operand::new(&region.buffer, region.offset, region.size)
    }
}

/// A way of placing benchmark operands. Implement it to benchmark kernels on real pool
/// blocks: return the blocks' buffers, offsets and sizes, and put the block handles in the
/// set's `keep_alive`.
///
/// Contract: `allocate(ctx, count, size)` returns exactly `count` regions of exactly `size`
/// bytes each, pairwise disjoint, at offsets that are multiples of the device's
/// `min_storage_buffer_offset_alignment`, in buffers with [`OPERAND_USAGES`].
pub trait OperandPlacement {
    /// The placement's name in reports (`raw`, `pool`, ...).
    fn name(&self) -> &str;

    /// The pool behind the placement's operands, if any: its configuration and memory mode,
    /// for the report ([`BenchReport::pools`](super::BenchReport::pools)). `None` (the
    /// default) for operands that come from no pool.
    fn pool(&self) -> Option<super::report::PlacementPool> {
        None
    }

    /// Allocates `count` operands of `size` bytes each, to be used together in one call.
    fn allocate(
        &mut self,
        ctx: &GpuContext,
        count: usize,
        size: u64,
    ) -> Result<OperandSet, BenchError>;
}

/// Creates one device buffer with [`OPERAND_USAGES`], failing with a clear error instead of
/// reaching the uncaptured-error handler.
pub fn create_operand_buffer(
    ctx: &GpuContext,
    size: u64,
    label: &str,
) -> Result<wgpu::Buffer, BenchError> {
    let max = ctx.limits().max_buffer_size;
    if size > max {
        return Err(BenchError::Config(format!(
            "a {label} buffer of {size} bytes exceeds the device's max_buffer_size of {max} bytes; use a smaller --size-mb"
        )));
    }
    catch(ctx.device(), || {
        ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: OPERAND_USAGES,
            mapped_at_creation: false,
        })
    })
    .map_err(|source| BenchError::Allocation {
        what: format!("{label} buffer of {size} bytes"),
        source,
    })
}

/// `raw`: every operand is a dedicated buffer of exactly its size, at offset 0.
#[derive(Debug, Default)]
pub struct RawBuffers;

impl OperandPlacement for RawBuffers {
    fn name(&self) -> &str {
        "raw"
    }

    fn allocate(
        &mut self,
        ctx: &GpuContext,
        count: usize,
        size: u64,
    ) -> Result<OperandSet, BenchError> {
        let regions = (0..count)
            .map(|_| {
                Ok(BufferRegion {
                    buffer: create_operand_buffer(ctx, size.max(4), "raw operand")?,
                    offset: 0,
                    size,
                })
            })
            .collect::<Result<Vec<_>, BenchError>>()?;
        Ok(OperandSet::new(regions, Box::new(())))
    }
}
