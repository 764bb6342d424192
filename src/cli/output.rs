//! Writing to standard output the way Unix tools do: a reader that closed the pipe early
//! (`wgpool replay t.csv --json | head -1`) ends the command quietly, and any other write
//! error is reported.

use std::io::Write;

use super::Failure;

/// Writes `text` to standard output and flushes it.
pub fn print(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|error| {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                Failure::stdout_closed()
            } else {
                Failure {
                    message: format!("cannot write to standard output: {error}"),
                    exit_code: 1,
                }
            }
        })
}

/// Writes `text` and a newline.
pub fn println(text: &str) -> Result<(), Failure> {
    print(&format!("{text}\n"))
}

/// Writes `value` as pretty-printed JSON and a newline; `what` names it in the error if it
/// cannot be encoded.
pub fn print_json<T: serde::Serialize>(value: &T, what: &str) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(value).map_err(|e| Failure {
        message: format!("cannot encode the {what}: {e}"),
        exit_code: 1,
    })?;
    println(&json)
}
