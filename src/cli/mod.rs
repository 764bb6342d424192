//! Subcommands of the `wgpool` binary.

pub mod bench;
pub mod info;
pub mod replay;

/// A failed command: what to print and the exit code.
pub struct Failure {
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
}
