//! [`PreparedKernel`]: a checked kernel call with its bind groups, recordable many times.

use super::kernel::{Access, Kernel};
use crate::pool::BlockRef;

pub(super) struct Window {
    pub(super) bind_group: wgpu::BindGroup,
    pub(super) groups: u32,
}

/// A kernel call that passed every check, with one bind group per binding window and its
/// parameters on the device. Recording it allocates nothing, so it is what benchmarks time.
///
/// It keeps the operands' buffers alive (bind groups hold them), and the memory of operands
/// made from pool blocks ([`Block::operand`](crate::pool::Block::operand)) from reuse while
/// it lives: recording it again after such a block is dropped is safe, and recording it
/// counts as exposing those blocks on the calling thread (see
/// [`FreeTiming`](crate::pool::FreeTiming)).
pub struct PreparedKernel {
    pub(super) kernel: Kernel,
    pub(super) access: Access,
    pub(super) pipeline: wgpu::ComputePipeline,
    pub(super) windows: Vec<Window>,
    /// Kept alive for the bind groups.
    #[allow(dead_code)]
    pub(super) params: wgpu::Buffer,
    pub(super) clear: Option<(wgpu::Buffer, u64)>,
    pub(super) operand_bytes: u64,
    /// The memory of operands that are pool blocks.
    pub(super) blocks: Vec<BlockRef>,
}

impl PreparedKernel {
    /// The kernel.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Which input declaration the call compiled to (read-write when an input shares a
    /// buffer with the output or result).
    pub fn access(&self) -> Access {
        self.access
    }

    /// Number of dispatches (binding windows).
    pub fn dispatches(&self) -> usize {
        self.windows.len()
    }

    /// Bytes per data operand.
    pub fn operand_bytes(&self) -> u64 {
        self.operand_bytes
    }

    /// Bytes read plus written by one run.
    pub fn bytes_moved(&self) -> u64 {
        self.kernel.bytes_moved(self.operand_bytes)
    }

    /// Whether an operand block moved ([`Pool::offload`](crate::pool::Pool::offload),
    /// [`Pool::prefetch`](crate::pool::Pool::prefetch)) after the kernel was prepared: its
    /// bind groups then name the memory the block left. Prepare the call again.
    pub fn is_stale(&self) -> bool {
        self.blocks.iter().any(BlockRef::is_stale)
    }

    /// Records the kernel into `encoder`: for a reduction, first a clear of the result word,
    /// then one compute pass with one dispatch per window. `timestamp_writes` go on that pass
    /// (the pass is begun even for empty operands, so timestamps are always written).
    pub fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) {
        if let Some((buffer, offset)) = &self.clear {
            encoder.clear_buffer(buffer, *offset, Some(4));
        }
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgpool kernel"),
            timestamp_writes,
        });
        self.record_in_pass(&mut pass);
    }

    /// Records only the dispatches into an open compute pass. A reduction's result word is
    /// not cleared: the result accumulates onto whatever it holds.
    pub fn record_in_pass(&self, pass: &mut wgpu::ComputePass<'_>) {
        for block in &self.blocks {
            block.mark_used();
        }
        pass.set_pipeline(&self.pipeline);
        for window in &self.windows {
            pass.set_bind_group(0, &window.bind_group, &[]);
            pass.dispatch_workgroups(window.groups, 1, 1);
        }
    }
}

impl std::fmt::Debug for PreparedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedKernel")
            .field("kernel", &self.kernel)
            .field("access", &self.access)
            .field("dispatches", &self.windows.len())
            .field("operand_bytes", &self.operand_bytes)
            .field("blocks", &self.blocks)
            .finish()
    }
}
