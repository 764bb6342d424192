//! Allocation traces: reading them (wgpool's CSV, RMM's log, PyTorch snapshot pickles) and
//! replaying them through the engine.

mod builder;
mod error;
mod gpu_replay;
mod input;
mod lines;
mod ops;
mod oracle;
mod parse;
mod pickle_node;
mod replay;
mod replay_error;
mod rmm;
mod torch_snapshot;

pub use crate::engine::CudaAddressModel;
/// The observer a replay tells of every event; it lives in [`history`](crate::history),
/// where the pool's event log observes its memory through the same trait.
pub use crate::history::EventObserver as ReplayObserver;
pub use error::{EXCERPT_CHARS, Position, TraceError, excerpt};
pub use gpu_replay::{GpuReplayError, GpuReplayOptions, GpuReplayReport, replay_on_gpu};
pub use input::{DEFAULT_MAX_INPUT_BYTES, ReadOptions, detect_format, read_trace, read_trace_from};
pub use lines::MAX_LINE_BYTES;
pub use ops::{Trace, TraceFormat, TraceOp};
pub use oracle::{Candidate, Divergence, OracleReport, OracleSegments, Outcome};
pub use parse::{HEADER, parse_trace, read_wgpool_csv};
pub use pickle_node::MAX_DEPTH as MAX_PICKLE_DEPTH;
pub use replay::{ReplayOptions, ReplayReport, replay, replay_observed};
pub use replay_error::ReplayError;
pub use rmm::{RMM_HEADER, read_rmm_csv};
pub use torch_snapshot::read_torch_snapshot;
