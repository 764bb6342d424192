//! Writing output the way Unix tools do: a reader that closed the pipe early
//! (`wgpool replay t.csv --json | head -1`, `--snapshot /dev/stdout | head -1`) ends the
//! command quietly, and any other write error is reported.

use std::error::Error;
use std::io::Write;

use super::Failure;

/// Writes `text` to standard output and flushes it.
pub fn print(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|error| {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                Failure::pipe_closed()
            } else {
                Failure::internal(format!("cannot write to standard output: {error}"))
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
    let json = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::internal(format!("cannot encode the {what}: {e}")))?;
    println(&json)
}

/// The failure of writing an output file (`--snapshot`, `--plot`): quiet where the file is
/// a pipe whose reader closed it, as on standard output, and reported otherwise.
pub fn file_failure(error: &(dyn Error + 'static)) -> Failure {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        {
            return Failure::pipe_closed();
        }
        cause = error.source();
    }
    Failure::internal(error)
}

/// Checks, before any work, that an output file named by `option` (`--plot`, `--snapshot`)
/// can be written, so that a long run is not thrown away for a path that was wrong from
/// the start. An existing regular file is opened for appending (nothing in it changes); a
/// new one is created and removed again; a folder is refused. Anything else that exists (a
/// pipe, a FIFO, `/dev/stdout`) is left alone: opening a FIFO would wait for its reader, and
/// closing it would end the reader's input before the run wrote anything. A file that
/// becomes unwritable during the run is still reported when it is written.
pub fn check_output_file(path: &std::path::Path, option: &str) -> Result<(), Failure> {
    let refuse = |why: String| {
        Failure::bad_input(format!(
            "{option} {}: cannot write there: {why}",
            path.display()
        ))
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(refuse("it is a directory".to_string())),
        Ok(meta) if !meta.is_file() => Ok(()),
        Ok(_) => std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| refuse(e.to_string())),
        Err(_) => {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| refuse(e.to_string()))?;
            std::fs::remove_file(path).map_err(|e| refuse(e.to_string()))
        }
    }
}
