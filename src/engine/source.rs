//! Where segment memory comes from: the trait the engine calls, and a virtual source.

use super::SegmentId;
use super::rounding::SegmentKind;

/// The device (or a simulation of it) behind the engine's segments.
///
/// The engine calls `create_segment` when it needs a new segment and `release_segment` when
/// it gives one back; it never touches memory itself. A source that cannot provide the
/// memory returns `Err` with a message, and the engine goes on down its retry chain.
pub trait SegmentSource {
    /// Provides memory for segment `id` of `size` bytes. `id` is not in use until the matching
    /// `release_segment`; ids are reused after release.
    fn create_segment(&mut self, id: SegmentId, size: u64, pool: SegmentKind)
    -> Result<(), String>;

    /// Gives back the memory of segment `id`, which has `size` bytes and no live blocks.
    fn release_segment(&mut self, id: SegmentId, size: u64);
}

/// Segments that exist only as numbers: for trace replay, property tests and benchmarks.
///
/// With a `device_limit`, creating a segment that would take the total over it fails, as a
/// device out-of-memory would.
#[derive(Debug, Clone, Default)]
pub struct VirtualSegments {
    /// Bytes of live segments.
    pub live_bytes: u64,
    /// Most bytes the simulated device holds, if limited.
    pub device_limit: Option<u64>,
    /// Segments created so far.
    pub created: u64,
    /// Segments released so far.
    pub released: u64,
}

impl VirtualSegments {
    /// A source with no limit.
    pub fn unlimited() -> Self {
        VirtualSegments::default()
    }

    /// A source that refuses to go over `limit` bytes.
    pub fn with_device_limit(limit: u64) -> Self {
        VirtualSegments {
            device_limit: Some(limit),
            ..Default::default()
        }
    }
}

impl SegmentSource for VirtualSegments {
    fn create_segment(
        &mut self,
        _id: SegmentId,
        size: u64,
        _pool: SegmentKind,
    ) -> Result<(), String> {
        if self
            .device_limit
            .is_some_and(|limit| self.live_bytes + size > limit)
        {
            return Err(format!(
                "the simulated device has {} bytes in use of its limit",
                self.live_bytes
            ));
        }
        self.live_bytes += size;
        self.created += 1;
        Ok(())
    }

    fn release_segment(&mut self, _id: SegmentId, size: u64) {
        self.live_bytes -= size;
        self.released += 1;
    }
}
