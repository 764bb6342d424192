//! Reading wgpool's own CSV: `action,id,size,stream` rows, as in `shared/traces`.

use std::io::BufRead;

use super::builder::TraceBuilder;
use super::error::{Position, TraceError, excerpt};
use super::lines::Lines;
use super::{Trace, TraceFormat};

/// The header line a trace starts with.
pub const HEADER: &str = "action,id,size,stream";

/// The next comma-separated field of a row, trimmed.
pub(crate) fn field<'a>(
    fields: &mut impl Iterator<Item = &'a str>,
    name: &str,
    line: usize,
    header: &str,
) -> Result<&'a str, TraceError> {
    fields.next().map(str::trim).ok_or_else(|| {
        TraceError::at(
            Position::Line(line),
            format!("missing the `{name}` field; rows have the form {header}"),
        )
    })
}

/// A field that must be a non-negative decimal integer.
pub(crate) fn number(text: &str, name: &str, line: usize) -> Result<u64, TraceError> {
    text.parse::<u64>().map_err(|_| {
        TraceError::at(
            Position::Line(line),
            format!(
                "`{name}` is `{}`, which is not a non-negative integer",
                excerpt(text)
            ),
        )
    })
}

/// Whether `row` is a header: the same column names, whatever the case and spaces.
pub(crate) fn is_header(row: &str, header: &str) -> bool {
    row.chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .eq_ignore_ascii_case(header)
}

/// Whether a first line that is not [`HEADER`] still names columns: its first field is
/// `action`, which no row of actions starts with. Such a file has a header of other (or
/// missing) columns, which the reader says rather than failing on the names as numbers.
fn names_columns(row: &str) -> bool {
    row.split(',')
        .next()
        .is_some_and(|first| first.trim().eq_ignore_ascii_case("action"))
}

/// Parses and validates a whole trace in memory. See [`read_wgpool_csv`].
pub fn parse_trace(text: &str) -> Result<Trace, TraceError> {
    read_wgpool_csv(text.as_bytes(), u64::MAX)
}

/// Reads a wgpool CSV trace from a stream of at most `max_bytes` bytes. Every id must be
/// allocated before it is freed, and not allocated again while live. The header line is
/// optional; blank lines are skipped; lines may end in `\n`, `\r\n` or `\r`, and a UTF-8
/// byte-order mark is skipped.
pub fn read_wgpool_csv(reader: impl BufRead, max_bytes: u64) -> Result<Trace, TraceError> {
    let mut builder = TraceBuilder::new(TraceFormat::WgpoolCsv);
    let mut lines = Lines::new(reader, max_bytes);
    while let Some((line, raw)) = lines.next_line()? {
        let row = raw.trim();
        if row.is_empty() || (line == 1 && is_header(row, HEADER)) {
            continue;
        }
        if line == 1 && names_columns(row) {
            return Err(TraceError::at(
                Position::Line(line),
                format!(
                    "a header of other columns, `{}`; wgpool's CSV has the header {HEADER}",
                    excerpt(row)
                ),
            ));
        }
        let mut fields = row.split(',');
        let action = field(&mut fields, "action", line, HEADER)?;
        let id = number(field(&mut fields, "id", line, HEADER)?, "id", line)?;
        let size = number(field(&mut fields, "size", line, HEADER)?, "size", line)?;
        let stream = number(field(&mut fields, "stream", line, HEADER)?, "stream", line)?;
        if fields.next().is_some() {
            return Err(TraceError::at(
                Position::Line(line),
                format!("too many fields; rows have the form {HEADER}"),
            ));
        }
        let done = match action {
            "alloc" => builder.alloc(id, size, stream, line),
            "free" => builder.free(id, line),
            "oom" => {
                builder.refused(size, stream, line);
                Ok(())
            }
            other => Err(format!(
                "unknown action `{}`; expected `alloc`, `free` or `oom`",
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

    #[test]
    fn parses_and_reuses_slots() {
        let t = parse_trace("action,id,size,stream\nalloc,7,100,0\nfree,7,100,0\nalloc,9,5,1\n")
            .unwrap();
        assert_eq!(t.slots, 1);
        assert_eq!(
            t.ops[2],
            TraceOp::Alloc {
                slot: 0,
                size: 5,
                stream: 1
            }
        );
        assert_eq!(t.positions, vec![2, 3, 4]);
        assert_eq!(t.position(0), Position::Line(2));
    }

    #[test]
    fn keeps_ids_and_reads_refused_allocations() {
        let t = parse_trace("alloc,4096,100,0\noom,0,7000,1\nfree,4096,100,0\n").unwrap();
        assert_eq!(t.ids, vec![4096, 0, 4096]);
        assert_eq!(
            t.ops[1],
            TraceOp::Refused {
                size: 7000,
                stream: 1
            }
        );
        // A refused allocation takes no slot.
        assert_eq!(t.slots, 1);
    }

    #[test]
    fn a_header_of_other_columns_is_named() {
        for text in [
            "action,id,size\nalloc,1,100\n",
            "Action, Id, Bytes, Stream\n",
        ] {
            let e = parse_trace(text).unwrap_err();
            assert_eq!(e.position(), Some(Position::Line(1)), "{e}");
            assert!(e.to_string().contains("a header of other columns"), "{e}");
            assert!(e.to_string().contains(HEADER), "{e}");
        }
        // The header itself, in any case and spacing, is still skipped.
        let t = parse_trace(" Action , ID,size,STREAM\nalloc,1,100,0\n").unwrap();
        assert_eq!(t.ops.len(), 1);
    }

    #[test]
    fn errors_name_the_line() {
        let line = |e: &TraceError| match e.position() {
            Some(Position::Line(n)) => n,
            other => panic!("{other:?}"),
        };
        let e = parse_trace("action,id,size,stream\nalloc,1,10,0\nfree,2,10,0\n").unwrap_err();
        assert_eq!(line(&e), 3);
        assert!(e.to_string().contains("not live"), "{e}");
        let e = parse_trace("alloc,1,ten,0\n").unwrap_err();
        assert_eq!(line(&e), 1);
        assert!(e.to_string().contains("`size` is `ten`"), "{e}");
        let e = parse_trace("alloc,1,10\n").unwrap_err();
        assert!(e.to_string().contains("missing the `stream` field"), "{e}");
        let e = parse_trace("alloc,1,10,0\nalloc,1,10,0\n").unwrap_err();
        assert_eq!(line(&e), 2);
        let e = parse_trace("malloc,1,10,0\n").unwrap_err();
        assert!(e.to_string().contains("unknown action"), "{e}");
        let e = parse_trace("alloc,1,10,0,9\n").unwrap_err();
        assert!(e.to_string().contains("too many fields"), "{e}");
    }

    /// F8: a byte-order mark and lone-CR line endings are a valid trace, not "`id` is `id`".
    #[test]
    fn a_byte_order_mark_and_lone_cr_endings_are_accepted() {
        for text in [
            "\u{feff}action,id,size,stream\nalloc,1,10,0\nfree,1,10,0\n",
            "action,id,size,stream\ralloc,1,10,0\rfree,1,10,0\r",
            "\u{feff}action,id,size,stream\r\nalloc,1,10,0\r\nfree,1,10,0",
        ] {
            let t = parse_trace(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(t.ops.len(), 2, "{text:?}");
        }
    }

    /// F7: a huge field gives a short message.
    #[test]
    fn a_huge_field_gives_a_bounded_message() {
        let text = format!("alloc,1,{},0\n", "9".repeat(60_000));
        let e = parse_trace(&text).unwrap_err().to_string();
        assert!(
            e.len() < 300,
            "{} bytes: {}",
            e.len(),
            &e[..300.min(e.len())]
        );
        assert!(e.contains("`size`"), "{e}");
    }
}
