//! Allocation traces: parsing the `shared/traces` CSV format and replaying it through the
//! engine.

mod parse;
mod replay;

pub use parse::{HEADER, Trace, TraceError, TraceOp, parse_trace};
pub use replay::{ReplayOptions, ReplayReport, replay};
