//! How a kernel's output differs from the CPU reference.

use thiserror::Error;

/// The first difference [`reference::check`](super::reference::check) found between a
/// kernel's output and the CPU reference. The message names the word or element and both
/// values.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum MismatchError {
    /// A reduction kernel gave no result word.
    #[error("no result word")]
    NoResult,
    /// An elementwise kernel gave no output.
    #[error("no output")]
    NoOutput,
    /// The output has another length than the input.
    #[error("output has {got} words, expected {expected}")]
    Length {
        /// Words in the output.
        got: usize,
        /// Words expected.
        expected: usize,
    },
    /// A move brought back another number of words than it was given.
    #[error("{got} words came back, {expected} expected")]
    Returned {
        /// Words that came back.
        got: usize,
        /// Words moved.
        expected: usize,
    },
    /// The checksum kernel's result differs from the CPU's checksum.
    #[error("checksum is {got:#010x}, CPU reference {want:#010x}")]
    Checksum {
        /// The kernel's checksum.
        got: u32,
        /// The CPU's checksum.
        want: u32,
    },
    /// The compare kernel counted another number of differing words than were changed.
    #[error("compare counted {got} differing words, {want} were changed")]
    Compare {
        /// The kernel's count.
        got: u32,
        /// Words changed.
        want: u32,
    },
    /// An output word (or element) differs from the reference; `detail` names it, its value
    /// and the reference's.
    #[error("{detail}")]
    Word {
        /// The index of the first wrong word.
        word: usize,
        /// What differs, in words.
        detail: String,
    },
}
