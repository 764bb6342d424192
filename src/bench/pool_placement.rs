//! Benchmark operands on real pool blocks: `pool` (device memory) and `host` (blocks the
//! pool offloaded to host memory, bound by kernels over PCIe).

use super::error::BenchError;
use super::placement::{BufferRegion, OperandSet, OperandSource};
use crate::config::Config;
use crate::gpu::GpuContext;
use crate::pool::{Block, Pool, Residency};

/// A leading block that puts the operands at non-zero offsets of a shared segment; 2 MiB keeps
/// it in the large pool, with the operands.
const LEAD_BYTES: u64 = 2 << 20;

/// Operands are pool blocks side by side in one shared segment, after a leading block, so
/// that every operand sits at a non-zero offset, as blocks of a real pool do.
///
/// The pool runs `policy:pytorch`, whose best fit makes that layout predictable: one block of
/// the whole span is allocated and freed, and the leading block and the operands are then
/// carved from its cached segment. Where the span exceeds `max_buffer_size`, each operand
/// gets a segment of its own after its own leading block.
pub struct PoolBlocks {
    pool: Pool,
    host: bool,
}

impl PoolBlocks {
    /// Device-resident pool blocks (placement `pool`).
    pub fn device(ctx: &GpuContext) -> Result<PoolBlocks, BenchError> {
        Self::new(ctx, false)
    }

    /// Pool blocks offloaded to host memory (placement `host`). Needs
    /// `MAPPABLE_PRIMARY_BUFFERS`, without which kernels cannot bind host memory.
    pub fn host(ctx: &GpuContext) -> Result<PoolBlocks, BenchError> {
        if !ctx
            .features()
            .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
        {
            return Err(BenchError::Config(
                "host-resident operands need MAPPABLE_PRIMARY_BUFFERS, which this adapter lacks"
                    .into(),
            ));
        }
        Self::new(ctx, true)
    }

    fn new(ctx: &GpuContext, host: bool) -> Result<PoolBlocks, BenchError> {
        let config = Config::parse("policy:pytorch").expect("a valid configuration");
        let pool =
            Pool::from_context(ctx, config).map_err(|e| BenchError::Config(e.to_string()))?;
        Ok(PoolBlocks { pool, host })
    }

    fn alloc(&self, size: u64) -> Result<Block, BenchError> {
        self.pool
            .alloc(size)
            .map_err(|e| BenchError::Config(format!("pool block of {size} bytes: {e}")))
    }
}

impl OperandSource for PoolBlocks {
    fn name(&self) -> &str {
        if self.host { "host" } else { "pool" }
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
