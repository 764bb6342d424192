//! Reading allocation traces: `action,id,size,stream` rows, as in `shared/traces`.

use std::collections::HashMap;

use thiserror::Error;

/// The header line a trace starts with.
pub const HEADER: &str = "action,id,size,stream";

/// A trace that cannot be replayed, with the 1-based line where the problem is.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("trace line {line}: {message}")]
pub struct TraceError {
    /// 1-based line number in the file.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

/// One trace operation, with ids resolved to dense slots so replay needs no hashing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate `size` bytes on `stream` into `slot`.
    Alloc {
        /// Dense index of the live id; reused after the id's free.
        slot: u32,
        /// Bytes asked for; zero means PyTorch's null allocation, which holds no memory.
        size: u64,
        /// The stream, numbered densely from 0 in order of first appearance.
        stream: u32,
    },
    /// Free the block in `slot`.
    Free {
        /// The slot of the id being freed.
        slot: u32,
    },
}

/// A parsed, validated trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The operations in file order.
    pub ops: Vec<TraceOp>,
    /// How many slots replay needs (the most ids live at once).
    pub slots: usize,
    /// Line number of each op, for error messages during replay.
    pub lines: Vec<usize>,
}

fn field<'a>(
    fields: &mut impl Iterator<Item = &'a str>,
    name: &str,
    line: usize,
) -> Result<&'a str, TraceError> {
    fields.next().map(str::trim).ok_or_else(|| TraceError {
        line,
        message: format!("missing the `{name}` field; rows have the form {HEADER}"),
    })
}

fn number<T: std::str::FromStr>(text: &str, name: &str, line: usize) -> Result<T, TraceError> {
    text.parse::<T>().map_err(|_| TraceError {
        line,
        message: format!("`{name}` is `{text}`, which is not a non-negative integer"),
    })
}

/// Parses and validates a whole trace. Every id must be allocated before it is freed, and
/// not allocated again while live. The header line is optional; blank lines are skipped.
pub fn parse_trace(text: &str) -> Result<Trace, TraceError> {
    let mut trace = Trace::default();
    let mut live: HashMap<u64, u32> = HashMap::new();
    let mut free_slots: Vec<u32> = Vec::new();
    // Traces may name streams by their handles (pointers); the engine wants small numbers.
    let mut streams: HashMap<u64, u32> = HashMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let row = raw.trim();
        if row.is_empty() || (line == 1 && row.replace(' ', "") == HEADER) {
            continue;
        }
        let mut fields = row.split(',');
        let action = field(&mut fields, "action", line)?;
        let id: u64 = number(field(&mut fields, "id", line)?, "id", line)?;
        let size: u64 = number(field(&mut fields, "size", line)?, "size", line)?;
        let raw_stream: u64 = number(field(&mut fields, "stream", line)?, "stream", line)?;
        if fields.next().is_some() {
            return Err(TraceError {
                line,
                message: format!("too many fields; rows have the form {HEADER}"),
            });
        }
        let op = match action {
            "alloc" => {
                if live.contains_key(&id) {
                    return Err(TraceError {
                        line,
                        message: format!("id {id} is allocated again while still live"),
                    });
                }
                let slot = free_slots.pop().unwrap_or_else(|| {
                    trace.slots += 1;
                    (trace.slots - 1) as u32
                });
                live.insert(id, slot);
                let next = streams.len() as u32;
                let stream = *streams.entry(raw_stream).or_insert(next);
                TraceOp::Alloc { slot, size, stream }
            }
            "free" => {
                let Some(slot) = live.remove(&id) else {
                    return Err(TraceError {
                        line,
                        message: format!("free of id {id}, which is not live"),
                    });
                };
                free_slots.push(slot);
                TraceOp::Free { slot }
            }
            other => {
                return Err(TraceError {
                    line,
                    message: format!("unknown action `{other}`; expected `alloc` or `free`"),
                });
            }
        };
        trace.ops.push(op);
        trace.lines.push(line);
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(t.lines, vec![2, 3, 4]);
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_trace("action,id,size,stream\nalloc,1,10,0\nfree,2,10,0\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("not live"), "{e}");
        let e = parse_trace("alloc,1,ten,0\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.to_string().contains("`size` is `ten`"), "{e}");
        let e = parse_trace("alloc,1,10\n").unwrap_err();
        assert!(e.message.contains("missing the `stream` field"), "{e}");
        let e = parse_trace("alloc,1,10,0\nalloc,1,10,0\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_trace("malloc,1,10,0\n").unwrap_err();
        assert!(e.message.contains("unknown action"), "{e}");
        let e = parse_trace("alloc,1,10,0,9\n").unwrap_err();
        assert!(e.message.contains("too many fields"), "{e}");
    }
}
