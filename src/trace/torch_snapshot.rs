//! Reading a PyTorch memory snapshot pickle (`torch.cuda.memory._dump_snapshot` after
//! `_record_memory_history`) as a trace.
//!
//! What is read, as PyTorch's `CUDACachingAllocator` records it:
//! - `device_traces[d]`: the events of device `d`, oldest first. `alloc` carries the block's
//!   address (`addr`), the size the caller asked for (`size`, before rounding) and the
//!   `stream`; `free_completed` carries the address and the same requested size, and is
//!   when the block went back to the cache. `free_requested`, `segment_*`, `snapshot` and
//!   unknown actions are not allocations and are skipped; `oom` is counted.
//! - `segments[i].blocks[j]`: the state at the dump. A block `active_allocated` there whose
//!   address no event names was allocated before recording began.
//!
//! The history is a ring buffer: a `free_completed` of an address with no earlier event was
//! allocated before the first event. Such allocations are replayed first (PyTorch's
//! memory_viz does the same). Addresses are the allocations' ids.

use std::collections::HashSet;
use std::io::Read;

use serde::de::DeserializeSeed;

use super::builder::TraceBuilder;
use super::error::{DECODER_MESSAGE_CHARS, Position, TraceError, clipped};
use super::pickle_node::{Node, NodeSeed};
use super::{Trace, TraceFormat};

/// Stack of the thread that decodes a pickle. Values nested deeper than the reader follows
/// are still built by the decoder and dropped recursively; each level costs under 200 bytes
/// of stack and at least 2 bytes of input, so a stack of 100 bytes per input byte (from 64
/// MiB, at most 4 GiB: address space, touched only as deep as the nesting goes) covers any
/// input up to 40 MB, and every real snapshot.
fn decoder_stack(input_len: usize) -> usize {
    const MIN: usize = 64 << 20;
    const MAX: usize = 4 << 30;
    input_len.saturating_mul(100).saturating_add(MIN).min(MAX)
}

/// Decodes a pickle of at most `max_bytes` bytes into a [`Node`].
pub(crate) fn decode_pickle(reader: impl Read, max_bytes: u64) -> Result<Node, TraceError> {
    let mut bytes = Vec::new();
    reader
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(TraceError::Io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(TraceError::TooLarge { limit: max_bytes });
    }
    let stack = decoder_stack(bytes.len());
    let worker = std::thread::Builder::new()
        .name("wgpool-unpickle".into())
        .stack_size(stack)
        .spawn(move || {
            let options = serde_pickle::DeOptions::new()
                .replace_unresolved_globals()
                .replace_recursive_structures();
            let mut de = serde_pickle::Deserializer::new(bytes.as_slice(), options);
            NodeSeed { depth: 0 }
                .deserialize(&mut de)
                .map_err(|e| match e {
                    serde_pickle::Error::Eval(code, offset) => TraceError::at(
                        Position::Byte(offset as u64),
                        format!(
                            "not a valid pickle: {}",
                            clipped(&code.to_string(), DECODER_MESSAGE_CHARS)
                        ),
                    ),
                    serde_pickle::Error::Io(e) => TraceError::Io(e),
                    serde_pickle::Error::Syntax(code) => TraceError::at(
                        Position::Whole,
                        format!(
                            "unexpected pickle content: {}",
                            clipped(&code.to_string(), DECODER_MESSAGE_CHARS)
                        ),
                    ),
                })
        })
        .map_err(TraceError::Io)?;
    worker
        .join()
        .unwrap_or_else(|_| Err(TraceError::at(Position::Whole, "the pickle decoder failed")))
}

fn int_field(node: &Node, key: &str, at: Position) -> Result<i128, TraceError> {
    match node.get(key) {
        Some(Node::Int(v)) => Ok(*v),
        Some(other) => Err(TraceError::at(
            at,
            format!("`{key}` is {}, not an int", other.kind()),
        )),
        None => Err(TraceError::at(at, format!("the `{key}` key is missing"))),
    }
}

/// A non-negative int that fits 64 bits: a size or an address.
fn u64_field(node: &Node, key: &str, at: Position) -> Result<u64, TraceError> {
    let v = int_field(node, key, at)?;
    u64::try_from(v).map_err(|_| {
        TraceError::at(
            at,
            format!("`{key}` is {v}, not a non-negative 64-bit integer"),
        )
    })
}

/// A stream: PyTorch stores the handle as a signed 64-bit int.
fn stream_field(node: &Node, at: Position) -> Result<u64, TraceError> {
    match node.get("stream") {
        None => Ok(0),
        Some(_) => {
            let v = int_field(node, "stream", at)?;
            i64::try_from(v)
                .map(|s| s as u64)
                .or_else(|_| u64::try_from(v))
                .map_err(|_| TraceError::at(at, format!("`stream` is {v}, beyond 64 bits")))
        }
    }
}

fn list<'a>(node: &'a Node, what: &str, at: Position) -> Result<&'a [Node], TraceError> {
    match node {
        Node::List(items) => Ok(items),
        other => Err(TraceError::at(
            at,
            format!("{what} is {}, not a list", other.kind()),
        )),
    }
}

/// One event of the chosen device.
struct Event {
    index: usize,
    action: String,
    node: Node,
}

/// Picks the device whose events to replay: `wanted`, or the only one with allocations.
fn choose_device(traces: &[Node], wanted: Option<usize>) -> Result<usize, TraceError> {
    if let Some(device) = wanted {
        if device >= traces.len() {
            return Err(TraceError::at(
                Position::Whole,
                format!(
                    "the snapshot has events for {} device(s); there is no device {device}",
                    traces.len()
                ),
            ));
        }
        return Ok(device);
    }
    let mut with_events = Vec::new();
    for (device, events) in traces.iter().enumerate() {
        let events = list(events, &format!("device_traces[{device}]"), Position::Whole)?;
        if events
            .iter()
            .any(|e| matches!(e.get("action"), Some(Node::Str(a)) if a == "alloc" || a == "free_completed"))
        {
            with_events.push(device);
        }
    }
    match with_events.as_slice() {
        [] => Ok(0),
        [only] => Ok(*only),
        several => Err(TraceError::at(
            Position::Whole,
            format!(
                "the snapshot has allocations on devices {several:?}; choose one with --trace-device"
            ),
        )),
    }
}

/// Reads a decoded snapshot as a trace of device `wanted` (by default the only device with
/// allocations).
pub(crate) fn snapshot_trace(root: &Node, wanted: Option<usize>) -> Result<Trace, TraceError> {
    // An old layout is a bare list of segments.
    let (segments, traces): (&[Node], &[Node]) = match root {
        Node::List(segments) => (segments, &[]),
        Node::Dict(_) => {
            let segments = match root.get("segments") {
                Some(s) => list(s, "`segments`", Position::Whole)?,
                None => &[],
            };
            let traces = match root.get("device_traces") {
                Some(t) => list(t, "`device_traces`", Position::Whole)?,
                None => {
                    return Err(TraceError::at(
                        Position::Whole,
                        "the pickle has no `device_traces`: record the history with torch.cuda.memory._record_memory_history() before _dump_snapshot()",
                    ));
                }
            };
            (segments, traces)
        }
        other => {
            return Err(TraceError::at(
                Position::Whole,
                format!(
                    "the pickle holds {}, not a PyTorch memory snapshot (a dict with `segments` and `device_traces`)",
                    other.kind()
                ),
            ));
        }
    };
    let device = choose_device(traces, wanted)?;
    let mut events = Vec::new();
    if let Some(list_node) = traces.get(device) {
        let at = Position::Whole;
        for (index, node) in list(list_node, &format!("device_traces[{device}]"), at)?
            .iter()
            .enumerate()
        {
            let at = Position::Event { device, index };
            if !matches!(node, Node::Dict(_)) {
                return Err(TraceError::at(
                    at,
                    format!("the event is {}, not a dict", node.kind()),
                ));
            }
            let action = match node.get("action") {
                Some(Node::Str(a)) => a.clone(),
                Some(other) => {
                    return Err(TraceError::at(
                        at,
                        format!("`action` is {}, not a str", other.kind()),
                    ));
                }
                None => return Err(TraceError::at(at, "the `action` key is missing")),
            };
            if matches!(action.as_str(), "alloc" | "free_completed" | "oom") {
                events.push(Event {
                    index,
                    action,
                    node: node.clone(),
                });
            }
        }
    }

    // Pass 1: which allocations were made before the first event.
    let mut live: HashSet<u64> = HashSet::new();
    let mut named: HashSet<u64> = HashSet::new();
    let mut before: Vec<(u64, u64, u64)> = Vec::new();
    for event in &events {
        let at = Position::Event {
            device,
            index: event.index,
        };
        match event.action.as_str() {
            "alloc" => {
                let addr = u64_field(&event.node, "addr", at)?;
                u64_field(&event.node, "size", at)?;
                stream_field(&event.node, at)?;
                if !live.insert(addr) {
                    return Err(TraceError::at(
                        at,
                        format!("address {addr:#x} is allocated again while still live"),
                    ));
                }
                named.insert(addr);
            }
            "free_completed" => {
                let addr = u64_field(&event.node, "addr", at)?;
                let size = u64_field(&event.node, "size", at)?;
                let stream = stream_field(&event.node, at)?;
                if !live.remove(&addr) {
                    if named.contains(&addr) {
                        return Err(TraceError::at(
                            at,
                            format!("free of address {addr:#x}, which is not live"),
                        ));
                    }
                    before.push((addr, size, stream));
                }
                named.insert(addr);
            }
            _ => {}
        }
    }
    for (s, segment) in segments.iter().enumerate() {
        let at = Position::Block {
            segment: s,
            block: 0,
        };
        if !matches!(segment, Node::Dict(_)) {
            return Err(TraceError::at(
                at,
                format!("the segment is {}, not a dict", segment.kind()),
            ));
        }
        let on_device = match segment.get("device") {
            Some(Node::Int(d)) => *d == device as i128,
            _ => true,
        };
        if !on_device {
            continue;
        }
        let mut addr = u64_field(segment, "address", at)?;
        let stream = stream_field(segment, at)?;
        let blocks = match segment.get("blocks") {
            Some(b) => list(b, "`blocks`", at)?,
            None => &[],
        };
        for (b, block) in blocks.iter().enumerate() {
            let at = Position::Block {
                segment: s,
                block: b,
            };
            let size = u64_field(block, "size", at)?;
            let state = match block.get("state") {
                Some(Node::Str(state)) => state.as_str(),
                _ => {
                    return Err(TraceError::at(
                        at,
                        "the `state` key is missing or not a str",
                    ));
                }
            };
            if state == "active_allocated" && !named.contains(&addr) {
                let requested = match block.get("requested_size") {
                    Some(_) => u64_field(block, "requested_size", at)?,
                    None => size,
                };
                before.push((addr, requested, stream));
                named.insert(addr);
            }
            addr = addr
                .checked_add(size)
                .ok_or_else(|| TraceError::at(at, "the block's address and size pass 2^64"))?;
        }
    }

    // Pass 2: the trace.
    let mut builder = TraceBuilder::new(TraceFormat::TorchSnapshot);
    for &(addr, size, stream) in &before {
        builder
            .alloc(addr, size, stream, 0)
            .map_err(|m| TraceError::at(Position::Whole, m))?;
        builder.pre_existing();
    }
    for event in &events {
        let at = Position::Event {
            device,
            index: event.index,
        };
        let position = event.index + 1;
        let node = &event.node;
        let done = match event.action.as_str() {
            "alloc" => builder.alloc(
                u64_field(node, "addr", at)?,
                u64_field(node, "size", at)?,
                stream_field(node, at)?,
                position,
            ),
            "free_completed" => builder.free(u64_field(node, "addr", at)?, position),
            _ => {
                builder.failed_alloc();
                Ok(())
            }
        };
        done.map_err(|m| TraceError::at(at, m))?;
    }
    let mut trace = builder.finish();
    trace.device = device;
    Ok(trace)
}

/// Reads a PyTorch snapshot pickle of at most `max_bytes` bytes as a trace of device
/// `device` (by default the only device with allocations).
pub fn read_torch_snapshot(
    reader: impl Read,
    max_bytes: u64,
    device: Option<usize>,
) -> Result<Trace, TraceError> {
    let root = decode_pickle(reader, max_bytes)?;
    snapshot_trace(&root, device)
}
