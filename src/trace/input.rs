//! Reading a trace in any supported format, told apart by its content, with limits.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::error::TraceError;
use super::parse::read_wgpool_csv;
use super::rmm::{looks_like_rmm, read_rmm_csv};
use super::torch_snapshot::read_torch_snapshot;
use super::{Trace, TraceFormat};

/// The default limit on a trace's size: 4 GiB.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 4 << 30;

/// How to read a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadOptions {
    /// The most bytes the input may have; a longer input is refused, not read to the end.
    pub max_bytes: u64,
    /// For a PyTorch snapshot with allocations on several devices: which one to replay.
    pub device: Option<usize>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_bytes: DEFAULT_MAX_INPUT_BYTES,
            device: None,
        }
    }
}

impl ReadOptions {
    /// Sets [`max_bytes`](Self::max_bytes).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sets [`device`](Self::device).
    pub fn with_device(mut self, device: Option<usize>) -> Self {
        self.device = device;
        self
    }
}

/// Which format the input starts like: a pickle (protocol 2 and later start with byte
/// 0x80), RMM's log (its header or a row of its actions), or else wgpool's CSV.
pub fn detect_format(start: &[u8]) -> TraceFormat {
    if start.first() == Some(&0x80) {
        return TraceFormat::TorchSnapshot;
    }
    let text = start.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(start);
    let end = text
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .unwrap_or(text.len());
    match std::str::from_utf8(&text[..end]) {
        Ok(first) if looks_like_rmm(first) => TraceFormat::RmmCsv,
        _ => TraceFormat::WgpoolCsv,
    }
}

/// Reads a trace from a stream, detecting its format from the first bytes.
pub fn read_trace_from(reader: impl Read, options: &ReadOptions) -> Result<Trace, TraceError> {
    let mut reader = BufReader::with_capacity(64 << 10, reader);
    // Enough of the start to see the first line of a text trace.
    let start = reader.fill_buf().map_err(TraceError::Io)?.to_vec();
    match detect_format(&start) {
        TraceFormat::TorchSnapshot => {
            read_torch_snapshot(reader, options.max_bytes, options.device)
        }
        TraceFormat::RmmCsv => read_rmm_csv(reader, options.max_bytes),
        TraceFormat::WgpoolCsv => read_wgpool_csv(reader, options.max_bytes),
    }
}

/// Reads the trace file at `path` in whichever supported format it is.
pub fn read_trace(path: &Path, options: &ReadOptions) -> Result<Trace, TraceError> {
    let file = std::fs::File::open(path).map_err(TraceError::Io)?;
    read_trace_from(file, options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_apart_by_content() {
        assert_eq!(detect_format(b"\x80\x04\x95"), TraceFormat::TorchSnapshot);
        assert_eq!(
            detect_format(b"Thread,Time,Action,Pointer,Size,Stream\n1,2"),
            TraceFormat::RmmCsv
        );
        assert_eq!(
            detect_format(b"\xEF\xBB\xBFThread,Time,Action,Pointer,Size,Stream\r"),
            TraceFormat::RmmCsv
        );
        assert_eq!(
            detect_format(b"action,id,size,stream\n"),
            TraceFormat::WgpoolCsv
        );
        assert_eq!(detect_format(b"alloc,1,2,0\n"), TraceFormat::WgpoolCsv);
        assert_eq!(detect_format(b""), TraceFormat::WgpoolCsv);
        assert_eq!(detect_format(&[0u8; 16]), TraceFormat::WgpoolCsv);
    }

    #[test]
    fn an_endless_stream_is_refused_early() {
        let zeros = std::io::repeat(0).take(1 << 30);
        let e = read_trace_from(zeros, &ReadOptions::default()).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
        let lines = std::io::repeat(b'\n').take(10 << 20);
        let e =
            read_trace_from(lines, &ReadOptions::default().with_max_bytes(1 << 20)).unwrap_err();
        assert!(
            matches!(e, TraceError::TooLarge { limit } if limit == 1 << 20),
            "{e}"
        );
    }
}
