//! Lines of a text trace, read as a stream with limits: `\n`, `\r\n` and a lone `\r` all end
//! a line, a leading UTF-8 byte-order mark is skipped, no line may be longer than
//! [`MAX_LINE_BYTES`] and the whole input no longer than the caller's limit.

use std::io::BufRead;

use super::error::{Position, TraceError, excerpt};

/// The longest line a text trace may have. Rows of every text format are a few dozen bytes;
/// the limit only stops a file that is not a trace (a binary file, `/dev/zero`) early.
pub const MAX_LINE_BYTES: usize = 64 << 10;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// A streaming reader of lines.
pub(crate) struct Lines<R> {
    reader: R,
    /// 1-based number of the line last returned.
    line: usize,
    buf: Vec<u8>,
    /// A `\r` ended the last line: a `\n` right after it belongs to it.
    after_cr: bool,
    started: bool,
    consumed: u64,
    max_bytes: u64,
}

impl<R: BufRead> Lines<R> {
    /// Lines of `reader`, which may hold at most `max_bytes` bytes.
    pub fn new(reader: R, max_bytes: u64) -> Lines<R> {
        Lines {
            reader,
            line: 0,
            buf: Vec::new(),
            after_cr: false,
            started: false,
            consumed: 0,
            max_bytes,
        }
    }

    fn consume(&mut self, n: usize) -> Result<(), TraceError> {
        self.reader.consume(n);
        self.consumed += n as u64;
        if self.consumed > self.max_bytes {
            return Err(TraceError::TooLarge {
                limit: self.max_bytes,
            });
        }
        Ok(())
    }

    fn skip_bom(&mut self) -> Result<(), TraceError> {
        self.started = true;
        // The mark may straddle two reads only on a reader with a tiny buffer; read it
        // byte by byte into a small array to be safe.
        let mut seen = 0;
        while seen < BOM.len() {
            let available = self.reader.fill_buf().map_err(TraceError::Io)?;
            if available.is_empty() || available[0] != BOM[seen] {
                break;
            }
            self.consume(1)?;
            seen += 1;
        }
        if seen > 0 && seen < BOM.len() {
            return Err(TraceError::at(
                Position::Line(1),
                "the input starts with part of a UTF-8 byte-order mark; it is not UTF-8 text",
            ));
        }
        Ok(())
    }

    /// The next line without its terminator, and its 1-based number; `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<(usize, &str)>, TraceError> {
        if !self.started {
            self.skip_bom()?;
        }
        self.buf.clear();
        let mut ended = false;
        loop {
            let available = self.reader.fill_buf().map_err(TraceError::Io)?;
            if available.is_empty() {
                break;
            }
            if self.after_cr {
                self.after_cr = false;
                if available[0] == b'\n' {
                    self.consume(1)?;
                    continue;
                }
            }
            match available.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    let cr = available[end] == b'\r';
                    self.buf.extend_from_slice(&available[..end]);
                    self.consume(end + 1)?;
                    self.after_cr = cr;
                    ended = true;
                }
                None => {
                    let n = available.len();
                    self.buf.extend_from_slice(available);
                    self.consume(n)?;
                }
            }
            if self.buf.len() > MAX_LINE_BYTES {
                return Err(TraceError::at(
                    Position::Line(self.line + 1),
                    format!(
                        "the line is longer than {MAX_LINE_BYTES} bytes; trace rows are a few dozen bytes, so this is not a trace"
                    ),
                ));
            }
            if ended {
                break;
            }
        }
        if !ended && self.buf.is_empty() {
            return Ok(None);
        }
        self.line += 1;
        let line = self.line;
        match std::str::from_utf8(&self.buf) {
            Ok(text) => Ok(Some((line, text))),
            Err(e) => Err(TraceError::at(
                Position::Line(line),
                format!(
                    "not UTF-8 text (an invalid byte at column {}): `{}`",
                    e.valid_up_to() + 1,
                    excerpt(&String::from_utf8_lossy(&self.buf))
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8]) -> Result<Vec<(usize, String)>, TraceError> {
        let mut lines = Lines::new(std::io::BufReader::with_capacity(3, bytes), 1 << 20);
        let mut out = Vec::new();
        while let Some((n, text)) = lines.next_line()? {
            out.push((n, text.to_string()));
        }
        Ok(out)
    }

    #[test]
    fn every_line_ending_and_a_byte_order_mark() {
        let expected = vec![(1, "a".to_string()), (2, "b".into()), (3, "c".into())];
        assert_eq!(all(b"a\nb\nc\n").unwrap(), expected);
        assert_eq!(all(b"a\r\nb\r\nc").unwrap(), expected);
        assert_eq!(all(b"a\rb\rc\r").unwrap(), expected);
        assert_eq!(all(b"\xEF\xBB\xBFa\rb\nc").unwrap(), expected);
        assert_eq!(all(b"a\n\nb").unwrap()[1], (2, String::new()));
        assert!(all(b"").unwrap().is_empty());
    }

    #[test]
    fn long_lines_binary_input_and_size_limit_are_refused() {
        let zeros = vec![0u8; MAX_LINE_BYTES + 10];
        let e = all(&zeros).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
        assert!(e.to_string().len() < 200, "{e}");
        let e = all(b"ok\n\xFF\xFEbad\n").unwrap_err();
        assert_eq!(e.position(), Some(Position::Line(2)));
        let mut lines = Lines::new(&b"a\nb\nc\nd\n"[..], 5);
        assert!(lines.next_line().is_ok());
        assert!(lines.next_line().is_ok());
        assert!(matches!(
            lines.next_line().unwrap_err(),
            TraceError::TooLarge { limit: 5 }
        ));
    }
}
