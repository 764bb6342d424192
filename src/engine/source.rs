//! Where segment memory comes from: the trait the engine calls, its typed error, and a
//! virtual source.

use std::error::Error;
use std::sync::Arc;

use super::rounding::SegmentKind;
use super::types::SegmentId;

/// The device (or a simulation of it) behind the engine's segments.
///
/// The engine calls `create_segment` when it needs a new segment and `release_segment` when
/// it gives one back; it never touches memory itself. A source that cannot provide the
/// memory returns a [`SourceError`]: an [out-of-memory](SourceError::out_of_memory) error
/// sends the engine down its retry chain (release cached segments, try again, and finally
/// [`AllocError::OutOfMemory`](super::AllocError::OutOfMemory)); [any other
/// error](SourceError::other) comes back to the caller at once as
/// [`AllocError::Source`](super::AllocError::Source), with the cache untouched.
pub trait SegmentSource {
    /// Provides memory for segment `id` of `size` bytes. `id` is not in use until the matching
    /// `release_segment`; ids are reused after release.
    ///
    /// # Errors
    ///
    /// [`SourceError::out_of_memory`] when the device has no memory for it now, and
    /// [`SourceError::other`] for any other failure.
    fn create_segment(
        &mut self,
        id: SegmentId,
        size: u64,
        kind: SegmentKind,
    ) -> Result<(), SourceError>;

    /// Gives back the memory of segment `id`, which has `size` bytes and no live blocks.
    fn release_segment(&mut self, id: SegmentId, size: u64);
}

/// What kind of failure a [`SourceError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceErrorKind {
    /// The device has no memory for the request now; releasing cached memory may help.
    OutOfMemory,
    /// Anything else (a validation error, a lost device): retrying will not help.
    Other,
}

/// Why a [`SegmentSource`] could not provide memory: its kind, and the underlying error as
/// [`source()`](Error::source).
///
/// Two errors are equal when their kinds and their messages are.
#[derive(Debug, Clone)]
pub struct SourceError {
    kind: SourceErrorKind,
    inner: Arc<dyn Error + Send + Sync + 'static>,
}

impl SourceError {
    /// The device is out of memory; `error` says what the device reported.
    pub fn out_of_memory(error: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        SourceError {
            kind: SourceErrorKind::OutOfMemory,
            inner: Arc::from(error.into()),
        }
    }

    /// Any failure other than out-of-memory; `error` is the underlying error.
    pub fn other(error: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        SourceError {
            kind: SourceErrorKind::Other,
            inner: Arc::from(error.into()),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> SourceErrorKind {
        self.kind
    }

    /// Whether the device was out of memory (the only kind the retry chain handles).
    pub fn is_out_of_memory(&self) -> bool {
        self.kind == SourceErrorKind::OutOfMemory
    }
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            SourceErrorKind::OutOfMemory => write!(f, "out of device memory: {}", self.inner),
            SourceErrorKind::Other => write!(f, "{}", self.inner),
        }
    }
}

impl Error for SourceError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.inner)
    }
}

impl PartialEq for SourceError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.inner.to_string() == other.inner.to_string()
    }
}

impl Eq for SourceError {}

/// Segments that exist only as numbers: for trace replay, property tests and benchmarks.
///
/// With a `device_limit`, creating a segment that would take the total over it fails with
/// an out-of-memory error, as a device would.
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
        _kind: SegmentKind,
    ) -> Result<(), SourceError> {
        if self
            .device_limit
            .is_some_and(|limit| self.live_bytes.saturating_add(size) > limit)
        {
            return Err(SourceError::out_of_memory(format!(
                "the simulated device has {} bytes in use of its limit",
                self.live_bytes
            )));
        }
        self.live_bytes += size;
        self.created += 1;
        Ok(())
    }

    fn release_segment(&mut self, _id: SegmentId, size: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.released += 1;
    }
}
