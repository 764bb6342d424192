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
    /// [`oracle`](super::ReplayOptions::with_oracle) with more than one
    /// [`pass`](super::ReplayOptions::with_passes): the trace's addresses are those of one
    /// pass, so only one can be checked against them.
    #[error(
        "the oracle checks the trace's own addresses, which hold for one pass; {passes} passes \
         asked for"
    )]
    OracleWithPasses {
        /// The passes asked for.
        passes: u32,
    },
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

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;
    use crate::config::Config;
    use crate::trace::{ReplayOptions, parse_trace, replay};

    #[test]
    fn an_allocation_above_the_largest_block_names_its_line_and_keeps_the_engine_error() {
        let trace = parse_trace("action,id,size,stream\nalloc,1,512,0\nalloc,2,4194304,0\n")
            .expect("a valid trace");
        let options = ReplayOptions::default().with_max_segment_size(Some(2 << 20));
        let error = replay(&trace, &Config::default(), &options).expect_err("too large");
        let ReplayError::Alloc { position, source } = &error else {
            panic!("not an allocation error: {error}");
        };
        assert_eq!(*position, Position::Line(3));
        assert!(matches!(**source, AllocError::TooLarge { .. }), "{source}");
        let message = error.to_string();
        assert!(
            message.starts_with("trace line 3: requested 4.00 MiB"),
            "{message}"
        );
        let cause = error.source().expect("the engine's error");
        assert_eq!(cause.to_string(), source.to_string());
        // Debug prints the message, not the fields.
        assert_eq!(format!("{error:?}"), message);
    }

    #[test]
    fn a_configuration_the_engine_refuses_is_the_engine_error() {
        let trace = parse_trace("action,id,size,stream\nalloc,1,512,0\n").expect("a valid trace");
        let options = ReplayOptions::default().with_page_mapping(None);
        let config = Config::parse("expandable_segments:True").expect("a valid configuration");
        let error = replay(&trace, &config, &options).expect_err("no pages to map");
        assert_eq!(error, ReplayError::Engine(EngineError::PagesUnavailable));
        assert_eq!(error.to_string(), EngineError::PagesUnavailable.to_string());
    }

    #[test]
    fn the_oracle_checks_one_pass_only() {
        let trace = parse_trace("action,id,size,stream\nalloc,1,512,0\n").expect("a valid trace");
        let options = ReplayOptions::default().with_oracle(true);
        let config = Config::parse("policy:pytorch").expect("a valid configuration");
        assert!(replay(&trace, &config, &options.with_passes(1)).is_ok());
        let error = replay(&trace, &config, &options.with_passes(2)).expect_err("two passes");
        assert_eq!(error, ReplayError::OracleWithPasses { passes: 2 });
        assert!(error.to_string().contains("2 passes"), "{error}");
    }
}
