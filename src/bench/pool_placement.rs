//! Benchmark operands on real pool blocks: `pool` (device memory) and `host` (blocks the
//! pool offloaded to host memory, bound by kernels over PCIe).

use super::error::BenchError;
use super::placement::{BufferRegion, OperandPlacement, OperandSet};
use super::report::PlacementPool;
use crate::config::Config;
use crate::gpu::GpuContext;
use crate::pool::{Block, Pool, Residency};

/// The configuration of the pool behind the `pool` and `host` placements unless another is
/// given: PyTorch's placement rules (predictable layouts, see [`PoolBlocks`]), with pages
/// mapped where the device can (Vulkan sparse binding) and fixed segments elsewhere.
pub const DEFAULT_POOL_CONF: &str = "policy:pytorch,expandable_segments:auto";

/// A leading block that puts the operands at non-zero offsets of a shared segment; 2 MiB keeps
/// it among the large segments, with the operands.
const LEAD_BYTES: u64 = 2 << 20;

/// Operands are pool blocks side by side in one shared segment, after a leading block, so
/// that every operand sits at a non-zero offset, as blocks of a real pool do.
///
/// The pool runs [`DEFAULT_POOL_CONF`] unless given another configuration: `policy:pytorch`,
/// whose best fit makes that layout predictable: one block of the whole span is allocated
/// and freed, and the leading block and the operands are then carved from its cached segment
/// (in pages mode, its cached mapped pages). Where the span exceeds `max_buffer_size`, each
/// operand gets a segment of its own after its own leading block.
pub struct PoolBlocks {
    pool: Pool,
    host: bool,
}

impl PoolBlocks {
    /// Device-resident pool blocks (placement `pool`), from a pool of [`DEFAULT_POOL_CONF`].
    pub fn device(ctx: &GpuContext) -> Result<PoolBlocks, BenchError> {
        Self::with_config(ctx, default_config(), Residency::Device)
    }

    /// Pool blocks offloaded to host memory (placement `host`), from a pool of
    /// [`DEFAULT_POOL_CONF`]. Needs `MAPPABLE_PRIMARY_BUFFERS`, without which kernels cannot
    /// bind host memory.
    pub fn host(ctx: &GpuContext) -> Result<PoolBlocks, BenchError> {
        Self::with_config(ctx, default_config(), Residency::Host)
    }

    /// Pool blocks from a pool of `config`, resident in device memory (placement `pool`) or
    /// offloaded to host memory (placement `host`, which needs `MAPPABLE_PRIMARY_BUFFERS`).
    /// A configuration the device cannot run (`expandable_segments:True` on a device that
    /// cannot map pages, say) is [`BenchError::Pool`].
    pub fn with_config(
        ctx: &GpuContext,
        config: Config,
        residency: Residency,
    ) -> Result<PoolBlocks, BenchError> {
        let host = residency == Residency::Host;
        if host
            && !ctx
                .features()
                .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
        {
            return Err(BenchError::Config(
                "host-resident operands need MAPPABLE_PRIMARY_BUFFERS, which this adapter lacks"
                    .into(),
            ));
        }
        let conf = config.to_conf_string();
        let pool = Pool::from_context(ctx, config).map_err(|source| BenchError::Pool {
            conf,
            source: Box::new(source),
        })?;
        Ok(PoolBlocks { pool, host })
    }

    /// The pool the blocks come from.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    fn alloc(&self, size: u64) -> Result<Block, BenchError> {
        self.pool.alloc(size).map_err(|source| BenchError::Alloc {
            size,
            source: Box::new(source),
        })
    }
}

/// [`DEFAULT_POOL_CONF`], parsed.
pub fn default_config() -> Config {
    Config::parse(DEFAULT_POOL_CONF).expect("DEFAULT_POOL_CONF parses")
}

impl OperandPlacement for PoolBlocks {
    fn name(&self) -> &str {
        if self.host { "host" } else { "pool" }
    }

    fn pool(&self) -> Option<PlacementPool> {
        Some(PlacementPool {
            placement: self.name().to_string(),
            conf: self.pool.config().to_conf_string(),
            memory_mode: self.pool.memory_mode(),
            memory_mode_reason: self.pool.memory_mode_reason(),
        })
    }

    fn allocate(
        &mut self,
        ctx: &GpuContext,
        count: usize,
        size: u64,
    ) -> Result<OperandSet, BenchError> {
        // Every command of the previous operand sets has been submitted: blocks dropped from
        // here on return to the pool at once.
        self.pool.mark_submitted();
        let span = LEAD_BYTES + count as u64 * size;
        let mut keep: Vec<Block> = Vec::with_capacity(count + 1);
        let mut operands: Vec<Block> = Vec::with_capacity(count);
        if span <= ctx.limits().max_buffer_size {
            drop(self.alloc(span)?);
            keep.push(self.alloc(LEAD_BYTES)?);
            for _ in 0..count {
                operands.push(self.alloc(size)?);
            }
        } else {
            for _ in 0..count {
                drop(self.alloc(LEAD_BYTES + size)?);
                keep.push(self.alloc(LEAD_BYTES)?);
                operands.push(self.alloc(size)?);
            }
        }
        if self.host {
            for block in &mut operands {
                self.pool
                    .offload(block)
                    .map_err(|e| BenchError::Config(format!("offloading an operand: {e}")))?;
                debug_assert_eq!(block.residency(), Residency::Host);
            }
        }
        let regions = operands
            .iter()
            .map(|b| BufferRegion {
                buffer: b.buffer().clone(),
                offset: b.offset(),
                size,
            })
            .collect();
        keep.extend(operands);
        Ok(OperandSet::new(regions, Box::new(keep)))
    }
}
