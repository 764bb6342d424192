//! What [`Engine::check_invariants`](super::Engine::check_invariants) found broken.

use thiserror::Error;

/// The first broken invariant [`Engine::check_invariants`](super::Engine::check_invariants)
/// found, by the part of the engine it concerns. Each variant carries the description of
/// what is wrong (segment or block, offsets, sizes), which is also its message.
///
/// A broken invariant is a bug of the engine (or of an unsafe caller): no sequence of calls
/// through the public API should produce one.
#[derive(Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InvariantError {
    /// The layout: blocks do not tile their segment or range without gaps or overlap, are
    /// not 512 B aligned or whole pages where they must be, two free (or unmapped) blocks are
    /// adjacent, or a block is not linked into its segment.
    #[error("{0}")]
    Layout(String),
    /// An index or list: the free index, the unmapped index, the evicted blocks, the idle
    /// segments or the idle pages disagree with the blocks.
    #[error("{0}")]
    Index(String),
    /// The statistics: a kept figure differs from a recount of the layout, or memory is held
    /// between calls.
    #[error("{0}")]
    Statistics(String),
}

crate::error_debug::debug_as_message!(InvariantError);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::engine::{Engine, EngineLimits, SegmentKind, VirtualSegments};

    #[test]
    fn a_statistic_that_differs_from_the_recount_is_a_statistics_error() {
        let mut engine =
            Engine::new(Config::default(), EngineLimits::unlimited()).expect("an engine");
        let mut device = VirtualSegments::unlimited();
        engine
            .allocate(4096, 0, &mut device)
            .expect("an allocation");
        assert_eq!(engine.check_invariants(), Ok(()));
        // A block counted that the layout does not hold.
        engine
            .state
            .stats
            .allocation
            .increase(SegmentKind::Small, 1);
        let error = engine.check_invariants().expect_err("a broken statistic");
        assert!(matches!(error, InvariantError::Statistics(_)), "{error}");
        let message = error.to_string();
        assert!(
            message.starts_with("statistics differ from a recount"),
            "{message}"
        );
        assert_eq!(format!("{error:?}"), message);
    }
}
