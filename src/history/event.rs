//! One allocator event.

use std::sync::Arc;

/// What happened. The names are PyTorch's `device_traces` actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// A block was handed out: `size` is the size asked for.
    Alloc,
    /// A block was given back to the pool: `size` is the size it was asked for with.
    FreeCompleted,
    /// A segment was created: `size` is its size.
    SegmentAlloc,
    /// A segment was released.
    SegmentFree,
    /// Pages were mapped into a segment (pools in pages mode).
    SegmentMap,
    /// Pages were unmapped from a segment.
    SegmentUnmap,
    /// A request failed with out-of-memory: `size` is the size asked for, `addr` is 0.
    Oom,
}

impl Action {
    /// PyTorch's name for the action.
    pub fn torch_name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
        }
    }
}

/// One event of a [`History`](super::History).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub action: Action,
    /// The block's or segment's address (0 for out-of-memory).
    pub addr: u64,
    /// Bytes; see [`Action`] for what they count.
    pub size: u64,
    /// The stream.
    pub stream: u32,
    /// When, in microseconds: wall-clock time in a live pool, the operation's index in a
    /// replay (which has no clock).
    pub time_us: u64,
    /// The block's label, where the allocation call took one.
    pub label: Option<Arc<str>>,
}

impl Event {
    /// An event without a label.
    pub fn new(action: Action, addr: u64, size: u64, stream: u32, time_us: u64) -> Event {
        Event {
            action,
            addr,
            size,
            stream,
            time_us,
            label: None,
        }
    }
}
