//! Memory history: a bounded record of allocator events, and snapshots of it in the layout of
//! PyTorch's `torch.cuda.memory._dump_snapshot`, which PyTorch's `_memory_viz` reads.
//!
//! ```
//! use wgpool::history::{Action, Event, History};
//!
//! let mut history = History::with_capacity(2);
//! for addr in [0x1000, 0x2000, 0x3000] {
//!     history.record(Event::new(Action::Alloc, addr, 512, 0, 0));
//! }
//! // The oldest event made room for the newest.
//! assert_eq!(history.len(), 2);
//! assert_eq!(history.dropped(), 1);
//! assert_eq!(history.events().next().unwrap().addr, 0x2000);
//! ```

mod event;
mod log;
mod observed;
mod observer;
mod recorder;
mod ring;
mod timeline;
mod torch;

pub use event::{Action, Event};
pub use log::EventLog;
pub(crate) use observed::Observed;
pub use observer::EventObserver;
pub use recorder::{MemorySample, ReplayRecorder};
pub use ring::History;
pub use timeline::Timeline;
pub use torch::{
    AllocatorSettings, Frame, SegmentPlacement, SnapshotBlock, SnapshotError, SnapshotSegment,
    TorchSnapshot, TraceEntry, write_torch_snapshot,
};

/// The label of the page events (`segment_unmap`) of a block evicted to host memory by a
/// pool with residency; in a snapshot it is the event's one frame.
pub const EVICTED: &str = "residency: evicted to host memory";

/// The label of the page events (`segment_map`) of a block a pool with residency restored
/// from host memory.
pub const RESTORED: &str = "residency: restored from host memory";

/// Microseconds since the Unix epoch, as PyTorch stamps its events (0 if the clock is before
/// 1970).
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
