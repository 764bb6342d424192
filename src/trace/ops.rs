//! A trace as replay reads it: operations on dense slots, whatever format it came from.

use super::error::Position;

/// The input formats `wgpool replay` reads, told apart by their content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceFormat {
    /// wgpool's own CSV: `action,id,size,stream` rows, as in `shared/traces`.
    #[default]
    WgpoolCsv,
    /// The CSV log of RMM's `logging_resource_adaptor`:
    /// `Thread,Time,Action,Pointer,Size,Stream`.
    RmmCsv,
    /// A PyTorch memory snapshot pickle (`torch.cuda.memory._dump_snapshot`).
    TorchSnapshot,
}

impl TraceFormat {
    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::WgpoolCsv => "wgpool-csv",
            TraceFormat::RmmCsv => "rmm-csv",
            TraceFormat::TorchSnapshot => "pytorch-snapshot",
        }
    }
}

/// One trace operation, with ids resolved to dense slots so replay needs no hashing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate `size` bytes on `stream` into `slot`.
    Alloc {
        /// Dense index of the live id; reused after the id's free.
        slot: u32,
        /// Bytes asked for; zero means PyTorch's null allocation, which holds no memory.
        size: u64,
        /// The stream, numbered densely from 0 in order of first appearance.
        stream: u32,
    },
    /// Free the block in `slot`.
    Free {
        /// The slot of the id being freed.
        slot: u32,
    },
    /// An allocation the recording allocator refused with out-of-memory (an
    /// `oom,0,SIZE,STREAM` row of wgpool's CSV). Replay attempts it; it holds no memory
    /// afterwards, and the trace never frees it.
    Refused {
        /// Bytes asked for.
        size: u64,
        /// The stream, numbered as for [`TraceOp::Alloc`].
        stream: u32,
    },
}

/// A parsed, validated trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The format it was read from.
    pub format: TraceFormat,
    /// The operations in input order.
    pub ops: Vec<TraceOp>,
    /// How many slots replay needs (the most ids live at once).
    pub slots: usize,
    /// Where each operation is in the input, for messages: the 1-based line of a CSV
    /// format, or for a PyTorch snapshot the 1-based event number in its device's
    /// `device_traces` list (0 for an allocation made before the first recorded event).
    /// See [`Trace::position`].
    pub positions: Vec<usize>,
    /// The id (or address) the input gave each operation (0 for a refused allocation). In a
    /// trace recorded from PyTorch the ids are the addresses it handed out, which
    /// `wgpool replay --oracle` checks.
    pub ids: Vec<u64>,
    /// Allocations the input records as failed (RMM's `allocate failure`, PyTorch's `oom`);
    /// they hold no memory and are not replayed.
    pub failed_allocs: u64,
    /// Allocations made before the input's first event (a PyTorch snapshot records only its
    /// last events): replayed first, at position 0.
    pub pre_existing: u64,
    /// For a PyTorch snapshot, the index of the device whose events were read.
    pub device: usize,
}

impl Trace {
    /// The trace with every size divided by `scale`, rounded up, and at least 1 byte (as
    /// `wgpool replay --gpu --scale` replays it); `scale` 1 borrows the trace as it is.
    ///
    /// ```
    /// use wgpool::trace::{Trace, TraceOp};
    /// let trace = Trace {
    ///     ops: vec![TraceOp::Alloc { slot: 0, size: 1000, stream: 0 }, TraceOp::Free { slot: 0 }],
    ///     slots: 1,
    ///     ..Trace::default()
    /// };
    /// let scaled = trace.scaled(16);
    /// assert!(matches!(scaled.ops[0], TraceOp::Alloc { size: 63, .. }));
    /// ```
    pub fn scaled(&self, scale: u64) -> std::borrow::Cow<'_, Trace> {
        if scale <= 1 {
            return std::borrow::Cow::Borrowed(self);
        }
        let divide = |size: u64| {
            if size == 0 {
                0
            } else {
                size.div_ceil(scale).max(1)
            }
        };
        let mut scaled = self.clone();
        for op in &mut scaled.ops {
            match op {
                TraceOp::Alloc { size, .. } | TraceOp::Refused { size, .. } => {
                    *size = divide(*size)
                }
                TraceOp::Free { .. } => {}
            }
        }
        std::borrow::Cow::Owned(scaled)
    }

    /// Where operation `op` is in the input.
    pub fn position(&self, op: usize) -> Position {
        let at = self.positions.get(op).copied().unwrap_or(0);
        match self.format {
            TraceFormat::WgpoolCsv | TraceFormat::RmmCsv => Position::Line(at),
            TraceFormat::TorchSnapshot if at == 0 => Position::Whole,
            TraceFormat::TorchSnapshot => Position::Event {
                device: self.device,
                index: at - 1,
            },
        }
    }
}
