//! What [`Pool::check_consistency`](super::Pool::check_consistency) found inconsistent.

use thiserror::Error;

use crate::engine::InvariantError;

/// The first inconsistency [`Pool::check_consistency`](super::Pool::check_consistency)
/// found: a broken invariant of an engine, or memory that does not match the engine's
/// segments. Like a broken invariant, it is a bug of the pool (or of a caller's unsafe code),
/// never the result of calls through the public API.
#[derive(Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConsistencyError {
    /// The engine's own invariants are broken.
    #[error(transparent)]
    Engine(#[from] InvariantError),
    /// A segment's buffer has another size than the segment.
    #[error("segment {segment} has {size} bytes but its buffer {buffer}")]
    SegmentBufferSize {
        /// The segment's id.
        segment: u32,
        /// The segment's size in the engine.
        size: u64,
        /// The buffer's size.
        buffer: u64,
    },
    /// The number of live segment buffers differs from the engine's segments.
    #[error("{buffers} segment buffers exist for {segments} segments")]
    SegmentBufferCount {
        /// Live segment buffers.
        buffers: usize,
        /// The engine's segments.
        segments: usize,
    },
    /// An address range of the engine has no buffer.
    #[error("range {range} has no buffer")]
    RangeWithoutBuffer {
        /// The range's id.
        range: u32,
    },
    /// An address range's buffer is smaller than the range.
    #[error("range {range} has {size} bytes but its buffer {buffer}")]
    RangeBufferSize {
        /// The range's id.
        range: u32,
        /// The range's size in the engine.
        size: u64,
        /// The buffer's size.
        buffer: u64,
    },
    /// A live block lies (partly) on pages that are not mapped.
    #[error("the live block at {offset}+{size} of range {range} lies on unmapped pages")]
    UnmappedBlock {
        /// The range's id.
        range: u32,
        /// The block's offset in the range.
        offset: u64,
        /// The block's size.
        size: u64,
    },
    /// The pool's host memory (host overflow) is inconsistent; the source says how.
    #[error("host memory: {0}")]
    Host(#[source] Box<ConsistencyError>),
}

crate::error_debug::debug_as_message!(ConsistencyError);

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn host_memory_errors_name_the_tier_and_keep_the_inner_error_as_source() {
        let inner = ConsistencyError::SegmentBufferCount {
            buffers: 2,
            segments: 3,
        };
        let error = ConsistencyError::Host(Box::new(inner.clone()));
        assert_eq!(
            error.to_string(),
            "host memory: 2 segment buffers exist for 3 segments"
        );
        let source = error.source().expect("the inner error");
        assert_eq!(source.to_string(), inner.to_string());
        // Debug prints the message once: the source's message is already part of it.
        assert_eq!(format!("{error:?}"), error.to_string());
    }
}
