//! Snapshots in the layout of PyTorch's `torch.cuda.memory._dump_snapshot`, written as a
//! pickle with `serde-pickle`.
//!
//! The layout, as PyTorch's `memory_snapshot.cpp` builds it and `_memory_viz` reads it:
//! - `segments`: one dict per segment: `device`, `address`, `total_size`,
//!   `allocated_size`, `active_size`, `requested_size`, `stream`, `segment_type`
//!   (`small` / `large`), `segment_pool_id`, `is_expandable`, `frames`, and `blocks` in
//!   address order, each with `address`, `size`, `requested_size`, `state`
//!   (`active_allocated` or `inactive`) and `frames`;
//! - `device_traces`: one list of events per device (wgpool writes one device), each with
//!   `action`, `addr` (`device_free` for `oom`), `size`, `stream`, `time_us` and `frames`;
//!   a free is written as PyTorch records it, `free_requested` then `free_completed`;
//! - `allocator_settings`: the configuration string under `PYTORCH_CUDA_ALLOC_CONF`.
//!
//! `frames` hold a block's label as one frame (`filename` = the label) where the allocation
//! took one, else nothing: wgpool records no stack traces.

use std::path::Path;

use serde::Serialize;
use thiserror::Error;

use super::{Action, Event, History};
use crate::engine::{SegmentKind, SegmentSnapshot};

/// A snapshot that could not be written.
#[derive(Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Encoding the pickle failed.
    #[error("cannot encode the snapshot pickle: {0}")]
    Encode(#[source] serde_pickle::Error),
    /// Writing the file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// One stack frame, as PyTorch stores it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Frame {
    /// File name (wgpool: the block's label).
    pub filename: String,
    /// Line number.
    pub line: i64,
    /// Function name.
    pub name: String,
}

/// A block of a snapshot segment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotBlock {
    /// Its address.
    pub address: u64,
    /// Its size.
    pub size: u64,
    /// The size asked for (0 for free blocks).
    pub requested_size: u64,
    /// `active_allocated` or `inactive`.
    pub state: &'static str,
    /// Its allocation's label, if any.
    pub frames: Vec<Frame>,
}

/// A snapshot segment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotSegment {
    /// Always 0: a pool serves one device.
    pub device: i64,
    /// Its address.
    pub address: u64,
    /// Its size.
    pub total_size: u64,
    /// Bytes of its allocated blocks.
    pub allocated_size: u64,
    /// Bytes of its active blocks (the same: wgpool has no pending frees).
    pub active_size: u64,
    /// Bytes asked for by its allocated blocks.
    pub requested_size: u64,
    /// Its stream.
    pub stream: i64,
    /// `small` or `large`.
    pub segment_type: &'static str,
    /// PyTorch's private-pool id; (0, 0) for the default pool.
    pub segment_pool_id: (i64, i64),
    /// Whether the segment is an address range of pages mode (PyTorch: an expandable segment).
    pub is_expandable: bool,
    /// Always empty.
    pub frames: Vec<Frame>,
    /// Its blocks in address order.
    pub blocks: Vec<SnapshotBlock>,
}

/// One event of `device_traces`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceEntry {
    /// PyTorch's action name.
    pub action: &'static str,
    /// The address (absent for `oom`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<u64>,
    /// For `oom`: the free device memory PyTorch would report (wgpool: 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free: Option<u64>,
    /// Bytes.
    pub size: u64,
    /// The stream.
    pub stream: i64,
    /// When.
    pub time_us: u64,
    /// The block's label as one frame, if any.
    pub frames: Vec<Frame>,
}

/// The allocator settings PyTorch stores with a snapshot; wgpool fills in its configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorSettings {
    /// The configuration in `WGPOOL_CONF` syntax.
    #[serde(rename = "PYTORCH_CUDA_ALLOC_CONF")]
    pub conf: String,
    /// Events the bounded history dropped before the ones written.
    pub wgpool_dropped_events: u64,
    /// What `time_us` counts: `us` (microseconds) or `op` (a replay's operation index).
    pub wgpool_time_unit: &'static str,
}

/// A whole snapshot, ready to pickle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TorchSnapshot {
    /// The segments now.
    pub segments: Vec<SnapshotSegment>,
    /// The events, one list per device.
    pub device_traces: Vec<Vec<TraceEntry>>,
    /// The configuration.
    pub allocator_settings: AllocatorSettings,
}

fn frames(label: Option<&str>) -> Vec<Frame> {
    label
        .map(|label| {
            vec![Frame {
                filename: label.to_string(),
                line: 0,
                name: "wgpool".to_string(),
            }]
        })
        .unwrap_or_default()
}

/// Where a segment of the engine's snapshot is, and what its blocks are called.
pub trait SegmentPlacement {
    /// The segment's address.
    fn address(&self, segment: &SegmentSnapshot) -> u64;
    /// The segment's stream.
    fn stream(&self, segment: &SegmentSnapshot) -> u32 {
        segment.stream
    }
    /// The label of the allocated block at `address`, if it has one.
    fn label(&self, _address: u64) -> Option<&str> {
        None
    }
}

impl TorchSnapshot {
    /// A snapshot of `segments` (placed by `placement`) and the events of `history`.
    /// `time_unit` is `us` or `op`.
    pub fn new(
        segments: &[SegmentSnapshot],
        placement: &impl SegmentPlacement,
        history: &History,
        conf: &str,
        time_unit: &'static str,
    ) -> TorchSnapshot {
        // An address range is reported as PyTorch reports an expandable segment: one
        // segment per run of mapped blocks, holding those blocks; unmapped address space is
        // not memory and appears nowhere. A fixed segment is one run.
        let mut out_segments: Vec<SnapshotSegment> = Vec::with_capacity(segments.len());
        for segment in segments {
            let base = placement.address(segment);
            let expandable = segment.blocks.iter().any(|b| !b.mapped);
            for run in segment.blocks.split(|b| !b.mapped) {
                let Some(first) = run.first() else { continue };
                let blocks: Vec<SnapshotBlock> = run
                    .iter()
                    .map(|b| SnapshotBlock {
                        address: base + b.offset,
                        size: b.size,
                        requested_size: if b.allocated { b.requested } else { 0 },
                        state: if b.allocated {
                            "active_allocated"
                        } else {
                            "inactive"
                        },
                        frames: if b.allocated {
                            frames(placement.label(base + b.offset))
                        } else {
                            Vec::new()
                        },
                    })
                    .collect();
                let allocated: u64 = run.iter().filter(|b| b.allocated).map(|b| b.size).sum();
                out_segments.push(SnapshotSegment {
                    device: 0,
                    address: base + first.offset,
                    total_size: run.iter().map(|b| b.size).sum(),
                    allocated_size: allocated,
                    active_size: allocated,
                    requested_size: blocks.iter().map(|b| b.requested_size).sum(),
                    stream: placement.stream(segment) as i64,
                    segment_type: match segment.kind {
                        SegmentKind::Small => "small",
                        SegmentKind::Large => "large",
                    },
                    segment_pool_id: (0, 0),
                    is_expandable: expandable,
                    frames: Vec::new(),
                    blocks,
                });
            }
        }
        out_segments.sort_by_key(|s| s.address);
        let mut events = Vec::with_capacity(history.len() + history.len() / 2);
        for e in history.events() {
            events.extend(entries(e));
        }
        TorchSnapshot {
            segments: out_segments,
            device_traces: vec![events],
            allocator_settings: AllocatorSettings {
                conf: conf.to_string(),
                wgpool_dropped_events: history.dropped(),
                wgpool_time_unit: time_unit,
            },
        }
    }

    /// The snapshot as pickle bytes.
    pub fn to_pickle(&self) -> Result<Vec<u8>, SnapshotError> {
        serde_pickle::to_vec(self, serde_pickle::SerOptions::new()).map_err(SnapshotError::Encode)
    }
}

/// The `device_traces` entries of one event: a free becomes `free_requested` and
/// `free_completed`, as PyTorch records it.
fn entries(e: &Event) -> Vec<TraceEntry> {
    let entry = |action: &'static str| TraceEntry {
        action,
        addr: (e.action != Action::Oom).then_some(e.addr),
        device_free: (e.action == Action::Oom).then_some(0),
        size: e.size,
        stream: e.stream as i64,
        time_us: e.time_us,
        frames: frames(e.label.as_deref()),
    };
    match e.action {
        Action::FreeCompleted => vec![entry("free_requested"), entry("free_completed")],
        other => vec![entry(other.torch_name())],
    }
}

/// Writes `snapshot` as a pickle to `path`.
pub fn write_torch_snapshot(path: &Path, snapshot: &TorchSnapshot) -> Result<(), SnapshotError> {
    let bytes = snapshot.to_pickle()?;
    std::fs::write(path, bytes).map_err(|source| SnapshotError::Write {
        path: path.display().to_string(),
        source,
    })
}

crate::error_debug::debug_as_message!(SnapshotError);
