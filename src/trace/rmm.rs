//! Reading the CSV log of RMM's `logging_resource_adaptor`.
//!
//! Its header is `Thread,Time,Action,Pointer,Size,Stream`; each row is one event:
//! `Action` is `allocate`, `free` or `allocate failure`, `Pointer` the address (`0x...`),
//! `Size` the bytes asked for (or given back), `Stream` the CUDA stream (`0x...` or a
//! number). The thread and the time are not needed for replay: events are replayed in file
//! order. A pointer is the id of its allocation until freed.

use std::io::BufRead;

use super::builder::TraceBuilder;
use super::error::{Position, TraceError, excerpt};
use super::lines::Lines;
use super::parse::{field, is_header, number};
use super::{Trace, TraceFormat};

/// RMM's header line.
pub const RMM_HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream";

/// An address or stream handle: `0x` hexadecimal, or decimal. glibc prints a null pointer as
/// `(nil)`.
fn handle(text: &str, name: &str, line: usize) -> Result<u64, TraceError> {
    if text == "(nil)" {
        return Ok(0);
    }
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse::<u64>().ok(),
    };
    parsed.ok_or_else(|| {
        TraceError::at(
            Position::Line(line),
            format!(
                "`{name}` is `{}`, which is neither a 0x-hexadecimal nor a decimal number",
                excerpt(text)
            ),
        )
    })
}

/// Whether a first line looks like RMM's log: its header, or a row whose third field is one
/// of its actions.
pub(crate) fn looks_like_rmm(first_line: &str) -> bool {
    let row = first_line.trim();
    if is_header(row, RMM_HEADER) {
        return true;
    }
    let fields: Vec<&str> = row.split(',').map(str::trim).collect();
    fields.len() == 6 && matches!(fields[2], "allocate" | "free" | "allocate failure")
}

/// Reads an RMM log from a stream of at most `max_bytes` bytes.
pub fn read_rmm_csv(reader: impl BufRead, max_bytes: u64) -> Result<Trace, TraceError> {
    let mut builder = TraceBuilder::new(TraceFormat::RmmCsv);
    let mut lines = Lines::new(reader, max_bytes);
    while let Some((line, raw)) = lines.next_line()? {
        let row = raw.trim();
        if row.is_empty() || (line == 1 && is_header(row, RMM_HEADER)) {
            continue;
        }
        let mut fields = row.split(',');
        let _thread = field(&mut fields, "Thread", line, RMM_HEADER)?;
        let _time = field(&mut fields, "Time", line, RMM_HEADER)?;
        let action = field(&mut fields, "Action", line, RMM_HEADER)?;
        let pointer = handle(
            field(&mut fields, "Pointer", line, RMM_HEADER)?,
            "Pointer",
            line,
        )?;
        let size = number(field(&mut fields, "Size", line, RMM_HEADER)?, "Size", line)?;
        let stream = handle(
            field(&mut fields, "Stream", line, RMM_HEADER)?,
            "Stream",
            line,
        )?;
        if fields.next().is_some() {
            return Err(TraceError::at(
                Position::Line(line),
                format!("too many fields; RMM rows have the form {RMM_HEADER}"),
            ));
        }
        let done = match action {
            "allocate" => builder
                .alloc(pointer, size, stream, line)
                .map_err(|_| format!("pointer {pointer:#x} is allocated again while still live")),
            "free" => builder
                .free(pointer, line)
                .map_err(|_| format!("free of pointer {pointer:#x}, which is not live")),
            "allocate failure" => {
                builder.failed_alloc();
                Ok(())
            }
            other => Err(format!(
                "unknown action `{}`; expected `allocate`, `free` or `allocate failure`",
                excerpt(other)
            )),
        };
        done.map_err(|message| TraceError::at(Position::Line(line), message))?;
    }
    Ok(builder.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceOp;

    const LOG: &str = "Thread,Time,Action,Pointer,Size,Stream\n\
        2342727,15:47:02.841961,allocate,0x10012400000,1048576,0x2\n\
        2342727,15:47:02.841970,allocate failure,(nil),99999999999,0x2\n\
        2342727,15:47:02.841977,free,0x10012400000,1048576,0x2\n\
        2342728,15:47:02.841990,allocate,0x10012400000,512,0\n";

    #[test]
    fn reads_allocations_frees_and_failures() {
        let t = read_rmm_csv(LOG.as_bytes(), u64::MAX).unwrap();
        assert_eq!(t.format, TraceFormat::RmmCsv);
        assert_eq!(
            t.ops,
            vec![
                TraceOp::Alloc {
                    slot: 0,
                    size: 1 << 20,
                    stream: 0
                },
                TraceOp::Free { slot: 0 },
                TraceOp::Alloc {
                    slot: 0,
                    size: 512,
                    stream: 1
                },
            ]
        );
        assert_eq!(t.positions, vec![2, 4, 5]);
        assert_eq!(t.failed_allocs, 1);
        assert!(looks_like_rmm(LOG.lines().next().unwrap()));
        assert!(looks_like_rmm("1,2,allocate,0x10,5,0"));
        assert!(!looks_like_rmm("action,id,size,stream"));
    }

    #[test]
    fn bad_rows_name_their_line() {
        for (row, part) in [
            ("1,2,allocate,0xZZ,5,0", "`Pointer` is `0xZZ`"),
            ("1,2,allocate,0x10,five,0", "`Size` is `five`"),
            ("1,2,allocate,0x10,5", "missing the `Stream` field"),
            ("1,2,allocate,0x10,5,0,9", "too many fields"),
            ("1,2,release,0x10,5,0", "unknown action `release`"),
            ("1,2,free,0x10,5,0", "not live"),
        ] {
            let text = format!("{RMM_HEADER}\n{row}\n");
            let e = read_rmm_csv(text.as_bytes(), u64::MAX).unwrap_err();
            assert_eq!(e.position(), Some(Position::Line(2)), "{row}: {e}");
            assert!(e.to_string().contains(part), "{row}: {e}");
        }
    }
}
