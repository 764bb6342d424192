//! Why a trace cannot be read, and where in the input the problem is.

use thiserror::Error;

use crate::format::visible;

/// A place in a trace's input, as error messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// A 1-based line of a CSV input (wgpool's format or RMM's log).
    Line(usize),
    /// An event of a PyTorch snapshot: `device_traces[device][index]` (0-based, as Python
    /// indexes it).
    Event {
        /// Index into `device_traces`.
        device: usize,
        /// Index of the event in that device's list.
        index: usize,
    },
    /// A block of a PyTorch snapshot's `segments` (0-based indices).
    Block {
        /// Index into `segments`.
        segment: usize,
        /// Index into that segment's `blocks`.
        block: usize,
    },
    /// A byte offset into a pickle, where its decoder stopped.
    Byte(u64),
    /// The input as a whole (its structure, not one place in it).
    Whole,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Line(line) => write!(f, "trace line {line}"),
            Position::Event { device, index } => {
                write!(f, "snapshot event device_traces[{device}][{index}]")
            }
            Position::Block { segment, block } => {
                write!(f, "snapshot block segments[{segment}].blocks[{block}]")
            }
            Position::Byte(offset) => write!(f, "pickle byte {offset}"),
            Position::Whole => write!(f, "trace"),
        }
    }
}

/// A trace that cannot be read or replayed. Messages quote at most a short excerpt of the
/// input, however long the offending field is.
#[derive(Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The input is malformed at `position`.
    #[error("{position}: {message}")]
    Malformed {
        /// Where the problem is.
        position: Position,
        /// What is wrong there.
        message: String,
    },
    /// The input is longer than the reader's limit.
    #[error(
        "the input is longer than the limit of {limit} bytes ({}); raise it with --max-input-mb if the file really is a trace",
        crate::format::bytes(*limit)
    )]
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// Reading the input failed.
    #[error("cannot read the trace: {0}")]
    Io(#[source] std::io::Error),
}

impl TraceError {
    /// A malformed-input error at `position`.
    pub fn at(position: Position, message: impl Into<String>) -> TraceError {
        TraceError::Malformed {
            position,
            message: message.into(),
        }
    }

    /// Where the problem is, for malformed input.
    pub fn position(&self) -> Option<Position> {
        match self {
            TraceError::Malformed { position, .. } => Some(*position),
            _ => None,
        }
    }
}

/// The longest excerpt of the input an error message quotes, in characters.
pub const EXCERPT_CHARS: usize = 48;

/// `text` for an error message: whole when short, else its first [`EXCERPT_CHARS`]
/// characters and its length, so that a 100 MB field gives a short message. Characters a
/// reader could not see are escaped ([`visible`](crate::format::visible)).
pub fn excerpt(text: &str) -> String {
    clipped(text, EXCERPT_CHARS)
}

/// The longest message of a decoder (serde-pickle's, which can quote whole values) that an
/// error passes on, in characters.
pub const DECODER_MESSAGE_CHARS: usize = 160;

/// `text` whole when it has at most `max_chars` characters, else its first `max_chars`
/// characters and its length; either way with the characters a reader could not see
/// escaped ([`visible`]).
pub fn clipped(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return visible(text);
    }
    let head: String = text.chars().take(max_chars).collect();
    format!("{}... ({} bytes in all)", visible(&head), text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_bounded() {
        assert_eq!(excerpt("ten"), "ten");
        let long = "9".repeat(1 << 20);
        let e = excerpt(&long);
        assert!(e.len() < 100, "{e}");
        assert!(e.ends_with("(1048576 bytes in all)"), "{e}");
        // Multi-byte characters are cut at a character boundary.
        assert!(excerpt(&"é".repeat(100)).starts_with("éé"));
        // Invisible characters are shown escaped, in the head of a long excerpt too.
        assert_eq!(excerpt("\u{feff}alloc"), "\\u{feff}alloc");
        assert!(excerpt(&format!("\u{200b}{}", "x".repeat(100))).starts_with("\\u{200b}xx"));
        let message = clipped(
            &format!("got Bytes({:?})", vec![7u8; 300]),
            DECODER_MESSAGE_CHARS,
        );
        assert!(
            message.chars().count() < DECODER_MESSAGE_CHARS + 30,
            "{message}"
        );
    }
}

crate::error_debug::debug_as_message!(TraceError);
