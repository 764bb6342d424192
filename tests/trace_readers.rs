//! Every trace reader on good and bad input: wgpool's CSV, RMM's log and PyTorch snapshot
//! pickles. Bad input gets an error naming the position, never a panic.

use serde_pickle::{HashableValue as K, Value as V};
use wgpool::trace::{Position, ReadOptions, TraceError, TraceFormat, TraceOp, read_trace_from};

const SMALL_SNAPSHOT: &[u8] = include_bytes!("data/torch-snapshot-small.pickle");
const MIB: u64 = 1 << 20;

fn read(bytes: &[u8]) -> Result<wgpool::trace::Trace, TraceError> {
    read_trace_from(bytes, &ReadOptions::default())
}

fn pickle(value: V) -> Vec<u8> {
    serde_pickle::value_to_vec(&value, serde_pickle::SerOptions::new()).unwrap()
}

fn dict(entries: Vec<(&str, V)>) -> V {
    V::Dict(
        entries
            .into_iter()
            .map(|(k, v)| (K::String(k.to_string()), v))
            .collect(),
    )
}

fn ev(action: &str, addr: i64, size: i64) -> V {
    dict(vec![
        ("action", V::String(action.into())),
        ("addr", V::I64(addr)),
        ("size", V::I64(size)),
        ("stream", V::I64(0)),
        ("time_us", V::I64(0)),
    ])
}

fn snapshot(traces: Vec<Vec<V>>) -> Vec<u8> {
    pickle(dict(vec![
        ("segments", V::List(vec![])),
        (
            "device_traces",
            V::List(traces.into_iter().map(V::List).collect()),
        ),
    ]))
}

#[test]
fn a_pytorch_snapshot_replays_its_allocations_in_order() {
    let t = read(SMALL_SNAPSHOT).unwrap();
    assert_eq!(t.format, TraceFormat::TorchSnapshot);
    let allocs: Vec<(u64, u32)> = t
        .ops
        .iter()
        .filter_map(|op| match *op {
            TraceOp::Alloc { size, stream, .. } => Some((size, stream)),
            TraceOp::Free { .. } | TraceOp::Refused { .. } => None,
        })
        .collect();
    // Two allocations from before recording (the 1 MiB block freed at event 2 and the
    // 3000 B block live in segments[1]), then the trace's own: 1000 B and 5 MiB on a side
    // stream.
    assert_eq!(allocs, vec![(MIB, 0), (3000, 0), (1000, 0), (5 * MIB, 1)]);
    assert_eq!(t.ops.len(), 6);
    assert_eq!(t.pre_existing, 2);
    assert_eq!(t.failed_allocs, 1, "the oom event");
    // Positions are 1-based event numbers; 0 before the first event.
    assert_eq!(t.positions, vec![0, 0, 1, 3, 5, 7]);
    assert_eq!(
        t.position(3),
        Position::Event {
            device: 0,
            index: 2
        }
    );
}

#[test]
fn every_truncation_of_a_snapshot_is_an_error_naming_a_byte() {
    for len in 0..SMALL_SNAPSHOT.len() - 1 {
        match read(&SMALL_SNAPSHOT[..len]) {
            Err(e @ TraceError::Malformed { .. }) => {
                let text = e.to_string();
                assert!(text.len() < 400, "{len}: {text}");
            }
            Ok(t) if len == 0 => assert!(t.ops.is_empty()),
            other => panic!("{len} bytes: {other:?}"),
        }
    }
    let e = read(&SMALL_SNAPSHOT[..SMALL_SNAPSHOT.len() / 2]).unwrap_err();
    assert!(matches!(e.position(), Some(Position::Byte(_))), "{e}");
}

#[test]
fn corrupted_snapshot_bytes_never_panic() {
    // Flip every byte in turn to a few values: each result is a trace or an error.
    for i in 2..SMALL_SNAPSHOT.len() {
        for value in [0u8, 0x28, 0x7d, 0xff] {
            let mut bytes = SMALL_SNAPSHOT.to_vec();
            bytes[i] = value;
            let _ = read(&bytes);
        }
    }
}

#[test]
fn malformed_snapshots_name_the_event() {
    let cases: Vec<(Vec<u8>, Position, &str)> = vec![
        (
            snapshot(vec![vec![ev("alloc", 4096, 10), ev("alloc", 4096, 10)]]),
            Position::Event {
                device: 0,
                index: 1,
            },
            "allocated again",
        ),
        (
            snapshot(vec![vec![
                ev("alloc", 4096, 10),
                ev("free_completed", 4096, 10),
                ev("free_completed", 4096, 10),
            ]]),
            Position::Event {
                device: 0,
                index: 2,
            },
            "not live",
        ),
        (
            snapshot(vec![vec![ev("alloc", 4096, -5)]]),
            Position::Event {
                device: 0,
                index: 0,
            },
            "`size` is -5",
        ),
        (
            snapshot(vec![vec![
                ev("alloc", 4096, 10),
                dict(vec![
                    ("action", V::String("alloc".into())),
                    ("size", V::I64(1)),
                ]),
            ]]),
            Position::Event {
                device: 0,
                index: 1,
            },
            "`addr` key is missing",
        ),
        (
            snapshot(vec![vec![dict(vec![
                ("action", V::String("alloc".into())),
                ("addr", V::String("0x1000".into())),
                ("size", V::I64(1)),
            ])]]),
            Position::Event {
                device: 0,
                index: 0,
            },
            "`addr` is a str",
        ),
        (
            snapshot(vec![vec![V::I64(3)]]),
            Position::Event {
                device: 0,
                index: 0,
            },
            "not a dict",
        ),
        (
            snapshot(vec![vec![dict(vec![("size", V::I64(1))])]]),
            Position::Event {
                device: 0,
                index: 0,
            },
            "`action` key is missing",
        ),
        (
            snapshot(vec![
                vec![ev("alloc", 4096, 10)],
                vec![ev("alloc", 8192, 10)],
            ]),
            Position::Whole,
            "--trace-device",
        ),
        (
            pickle(dict(vec![("segments", V::List(vec![]))])),
            Position::Whole,
            "_record_memory_history",
        ),
        (
            pickle(V::I64(7)),
            Position::Whole,
            "not a PyTorch memory snapshot",
        ),
    ];
    for (bytes, position, part) in cases {
        let e = read(&bytes).unwrap_err();
        assert_eq!(e.position(), Some(position), "{e}");
        assert!(e.to_string().contains(part), "`{e}` lacks `{part}`");
    }
}

#[test]
fn a_chosen_device_is_replayed() {
    let bytes = snapshot(vec![
        vec![ev("alloc", 4096, 10)],
        vec![ev("alloc", 8192, 30)],
    ]);
    let t = read_trace_from(&bytes[..], &ReadOptions::default().with_device(Some(1))).unwrap();
    assert_eq!(
        t.ops,
        vec![TraceOp::Alloc {
            slot: 0,
            size: 30,
            stream: 0
        }]
    );
    let e = read_trace_from(&bytes[..], &ReadOptions::default().with_device(Some(2))).unwrap_err();
    assert!(e.to_string().contains("no device 2"), "{e}");
}

#[test]
fn deeply_nested_pickles_are_refused_not_overflowing_the_stack() {
    // {"segments": [], "other": [[[...]]]} with 100,000 levels, written opcode by opcode:
    // EMPTY_LIST n times, then APPEND n - 1 times.
    let levels = 100_000;
    let mut bytes = b"\x80\x02}X\x08\x00\x00\x00segments]sX\x05\x00\x00\x00other".to_vec();
    bytes.extend(std::iter::repeat_n(b']', levels));
    bytes.extend(std::iter::repeat_n(b'a', levels - 1));
    bytes.extend(b"s.");
    let e = read(&bytes).unwrap_err();
    assert!(e.to_string().contains("nested more than"), "{e}");
}

#[test]
fn an_rmm_log_is_read_by_content() {
    let log = "Thread,Time,Action,Pointer,Size,Stream\n\
        1,15:47:02.841961,allocate,0x7f0000000000,4194304,0x0\n\
        1,15:47:02.841977,allocate,0x7f0000400000,1000,0x0\n\
        1,15:47:02.841988,free,0x7f0000000000,4194304,0x0\n";
    let t = read(log.as_bytes()).unwrap();
    assert_eq!(t.format, TraceFormat::RmmCsv);
    assert_eq!(t.ops.len(), 3);
    let e = read(b"Thread,Time,Action,Pointer,Size,Stream\n1,2,allocate,0x10,1x,0\n").unwrap_err();
    assert_eq!(e.position(), Some(Position::Line(2)));
}

#[test]
fn wgpool_csv_is_read_by_content_with_any_line_ending() {
    for text in [
        &b"action,id,size,stream\nalloc,1,5,0\nfree,1,5,0\n"[..],
        b"\xEF\xBB\xBFaction,id,size,stream\ralloc,1,5,0\rfree,1,5,0\r",
        b"alloc,1,5,0\r\nfree,1,5,0",
    ] {
        let t = read(text).unwrap();
        assert_eq!((t.format, t.ops.len()), (TraceFormat::WgpoolCsv, 2));
    }
}

/// A snapshot written by PyTorch 2.11's `_dump_snapshot` on an H200 (a 3-layer MLP, 3
/// training steps; /work/oracle, recorded by tools/oracle). PyTorch measured: reserved peak
/// 494,927,872 B, allocated peak 489,622,528 B, requested peak 489,619,660 B.
const TORCH_MLP: &[u8] = include_bytes!("data/torch-2.11-mlp-small.pickle");

#[test]
fn a_snapshot_written_by_pytorch_replays_to_pytorchs_peaks() {
    let trace = read(TORCH_MLP).unwrap();
    assert_eq!(trace.format, TraceFormat::TorchSnapshot);
    assert_eq!(trace.ops.len(), 215, "109 allocs and 106 frees");
    assert_eq!(trace.pre_existing, 0);
    let config = wgpool::config::Config::parse("policy:pytorch").unwrap();
    let options = wgpool::trace::ReplayOptions::default().with_check_every_op(true);
    let report = wgpool::trace::replay(&trace, &config, &options).unwrap();
    assert_eq!(report.peak_live_bytes, 489_619_660);
    assert_eq!(report.peak_allocated_bytes, 489_622_528);
    assert_eq!(report.peak_reserved_bytes, 494_927_872);
    assert_eq!(report.segments_created, 14);
}

#[test]
fn truncations_of_a_pytorch_snapshot_are_errors() {
    for len in (1..TORCH_MLP.len() - 1).step_by(97) {
        let e = read(&TORCH_MLP[..len]).unwrap_err();
        assert!(e.position().is_some(), "{len}: {e}");
    }
}
