//! Subcommands of the `wgpool` binary.

pub mod bench;
pub mod compare;
pub mod info;
pub mod output;
pub mod replay;
pub mod replay_gpu;

/// A failed command: what to print and the exit code.
pub struct Failure {
    /// The message for standard error; empty for a quiet exit.
    pub message: String,
    pub exit_code: u8,
}

impl Failure {
    /// Bad input from the user (a malformed file or option): exit code 2.
    pub fn bad_input(message: impl std::fmt::Display) -> Failure {
        Failure {
            message: message.to_string(),
            exit_code: 2,
        }
    }

    /// Standard output was closed by its reader: stop at once, print nothing, exit 0, as
    /// Unix tools do when the rest of a pipeline needs no more.
    pub fn stdout_closed() -> Failure {
        Failure {
            message: String::new(),
            exit_code: 0,
        }
    }
}
