//! Why a replay through the engine stopped.

use thiserror::Error;

use super::Position;
use crate::engine::{AllocError, EngineError, FreeError, InvariantError};

/// Why [`replay`](super::replay) or [`replay_observed`](super::replay_observed) stopped.
/// Out-of-memory is not an error (the replay counts it and goes on); each variant keeps the
/// engine's own error as its source, and names the operation of the trace where one is
/// known.
#[derive(Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The engine refuses the configuration with the replay's limits (say a cap that cannot
    /// be computed, or `expandable_segments:True` where the replay maps no pages).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// An allocation of the trace failed with an error other than out-of-memory: a request
    /// above the largest block the engine serves ([`AllocError::TooLarge`], which names the
    /// size and the limit).
    #[error("{position}: {source}")]
    Alloc {
        /// The operation of the trace that failed.
        position: Position,
        /// The engine's error (boxed: it can be large).
        #[source]
        source: Box<AllocError>,
    },
    /// The engine refused to free a block it handed out (a bug of the engine).
    #[error(transparent)]
    Free(#[from] FreeError),
    /// With [`check_every_op`](super::ReplayOptions::with_check_every_op), the engine's
    /// invariants were broken after an operation (a bug of the engine).
    #[error("after {position}: {source}")]
    Invariant {
        /// The operation after which the check failed.
        position: Position,
        /// The broken invariant.
        #[source]
        source: InvariantError,
    },
}

crate::error_debug::debug_as_message!(ReplayError);
