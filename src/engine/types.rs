//! The engine's public value types: ids, where an allocation was placed, and device limits.

use super::rounding::SegmentKind;
use super::source::PageMapping;

/// The largest segment: 2 TiB less 512 B, so that sizes and offsets in 512 B granules fit
/// 32 bits.
pub const MAX_SEGMENT_SIZE: u64 = (u32::MAX as u64) << 9;

// The configuration's largest size option is this segment size in whole MiB.
const _: () = assert!(crate::config::MAX_SIZE_MB == MAX_SEGMENT_SIZE >> 20);

/// A segment: one device allocation, as the [`SegmentSource`](super::SegmentSource) knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentId(pub u32);

/// A live block. Ids carry the record's serial number, which changes with every allocation
/// the record serves, so a stale id is refused rather than freeing a block that reused its
/// slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockId {
    pub(super) index: u32,
    pub(super) serial: u32,
}

/// How the engine gets memory: fixed segments, or pages mapped into address ranges.
/// Serialized as `segments` or `pages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryMode {
    /// Each segment is one device allocation of fixed size (a wgpu buffer).
    Segments,
    /// Each segment is an address range; memory is mapped in pages where blocks live.
    Pages,
}

impl MemoryMode {
    /// `segments` or `pages`, as reports write it.
    pub fn name(self) -> &'static str {
        match self {
            MemoryMode::Segments => "segments",
            MemoryMode::Pages => "pages",
        }
    }
}

impl std::fmt::Display for MemoryMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a request was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Handle for [`Engine::free`](super::Engine::free).
    pub block: BlockId,
    /// The segment holding the block.
    pub segment: SegmentId,
    /// Byte offset of the block in its segment; a multiple of 512.
    pub offset: u64,
    /// The block's size: at least the request rounded up (a whole cached block may be
    /// larger); a multiple of 512.
    pub block_size: u64,
    /// The size the caller asked for.
    pub requested: u64,
    /// The kind of segment (small or large) the block lives in.
    pub kind: SegmentKind,
    /// The block's address: its segment's address plus `offset`. Free blocks of equal size
    /// are reused lowest address first, as PyTorch reuses them by device address.
    pub address: u64,
}

/// Limits that come from the device rather than from the configuration.
///
/// ```
/// use wgpool::engine::EngineLimits;
/// let limits = EngineLimits::unlimited()
///     .with_device_memory(Some(80 << 30))
///     .with_max_segment_size(1 << 30);
/// assert_eq!(limits.max_segment_size, 1 << 30);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineLimits {
    /// Total device memory, if known; `per_process_memory_fraction` applies to it.
    pub device_memory: Option<u64>,
    /// The largest segment the source can create (wgpu's `max_buffer_size`). The engine
    /// rounds it down to 512 B and to at most [`MAX_SEGMENT_SIZE`].
    pub max_segment_size: u64,
    /// Whether the source can map pages (its [`page_mapping`]); with
    /// `expandable_segments:auto` the engine then runs in pages mode.
    ///
    /// [`page_mapping`]: super::SegmentSource::page_mapping
    pub page_mapping: Option<PageMapping>,
}

impl EngineLimits {
    /// No device size, segments up to [`MAX_SEGMENT_SIZE`] (2 TiB), and no page mapping.
    pub fn unlimited() -> Self {
        EngineLimits {
            device_memory: None,
            max_segment_size: MAX_SEGMENT_SIZE,
            page_mapping: None,
        }
    }

    /// These limits with page mapping as the source offers it.
    pub fn with_page_mapping(mut self, page_mapping: Option<PageMapping>) -> Self {
        self.page_mapping = page_mapping;
        self
    }

    /// These limits with the device's total memory (for `per_process_memory_fraction`).
    pub fn with_device_memory(mut self, device_memory: Option<u64>) -> Self {
        self.device_memory = device_memory;
        self
    }

    /// These limits with the largest segment the source can create.
    pub fn with_max_segment_size(mut self, max_segment_size: u64) -> Self {
        self.max_segment_size = max_segment_size;
        self
    }
}
