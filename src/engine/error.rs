//! Errors the engine returns: out-of-memory with its diagnosis, and bad requests.

use thiserror::Error;

use super::rounding::SegmentKind;
use super::source::SourceError;
use super::types::BlockId;
use crate::config::CapError;
use crate::format::bytes;

/// Why the last segment creation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OomCause {
    /// Creating the segment would have taken reserved memory over the cap.
    Cap,
    /// The segment source (the device) was out of memory; its error.
    Device(SourceError),
}

impl std::fmt::Display for OomCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OomCause::Cap => write!(f, "the cap would be exceeded"),
            OomCause::Device(error) => write!(f, "{error}"),
        }
    }
}

/// An allocation that could not be served even after releasing every cached block.
///
/// The message states what was asked for, the cap, what is allocated, what is reserved but
/// unallocated, and what to try. The engine is unchanged by the failed request apart from
/// the cached blocks it released and its `num_ooms` counter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutOfMemory {
    /// The caller's size.
    pub requested: u64,
    /// The size it was rounded to.
    pub rounded: u64,
    /// The segment size that could not be created.
    pub segment_size: u64,
    /// The kind of segment the request needed.
    pub kind: SegmentKind,
    /// The cap on reserved memory, if any.
    pub cap: Option<u64>,
    /// Bytes held by live blocks.
    pub allocated: u64,
    /// Bytes held by segments.
    pub reserved: u64,
    /// Bytes that went to host memory through overflow, if the pool uses it.
    pub host_overflow: Option<u64>,
    /// Bytes of dropped blocks that the pool holds until the commands recorded with them are
    /// submitted (`Pool::submit`, `Pool::mark_submitted`), if any.
    pub held_for_submission: Option<u64>,
    /// Why the last attempt failed.
    pub cause: OomCause,
    /// Where the pool pages blocks to host memory (residency): what it could not evict to
    /// make room.
    pub residency: Option<RoomShortfall>,
}

/// Room a pool with residency could not make on the device: the bytes it needed, and where
/// the device memory it could not evict is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RoomShortfall {
    /// The bytes asked for.
    pub needed: u64,
    /// The bytes every block that could go would have given back.
    pub evictable: u64,
    /// Bytes of pinned blocks on the device.
    pub pinned: u64,
    /// Bytes of blocks that recordings not yet submitted may name, or that the pool's own
    /// transfers were using.
    pub in_use: u64,
    /// Bytes of blocks the same request needs on the device.
    pub kept: u64,
    /// Set when host memory is what ran out: evicting stopped at the host limit (its bytes,
    /// or 0 where the host itself refused).
    pub host_full: Option<u64>,
}

impl std::fmt::Display for RoomShortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(limit) = self.host_full {
            return match limit {
                0 => write!(f, "host memory refused the copies of evicted blocks"),
                limit => write!(
                    f,
                    "host memory is full: the evicted blocks' copies reached the host limit of \
                     {} (ResidencyOptions::with_host_limit)",
                    bytes(limit)
                ),
            };
        }
        write!(
            f,
            "residency could evict {} of the {} needed: {} is pinned, {} is named by \
             recordings not yet submitted, {} is needed by the same request",
            bytes(self.evictable),
            bytes(self.needed),
            bytes(self.pinned),
            bytes(self.in_use),
            bytes(self.kept)
        )
    }
}

impl OutOfMemory {
    /// Reserved bytes that no live block uses (fragmentation and cache).
    pub fn reserved_unallocated(&self) -> u64 {
        self.reserved.saturating_sub(self.allocated)
    }
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "wgpool out of memory: tried to allocate {} (rounded to {}, needing a new {} {} segment). ",
            bytes(self.requested),
            bytes(self.rounded),
            bytes(self.segment_size),
            match self.kind {
                SegmentKind::Small => "small",
                SegmentKind::Large => "large",
            },
        )?;
        match (&self.cap, &self.cause) {
            (Some(cap), OomCause::Cap) => {
                write!(f, "The cap is {} and would be exceeded. ", bytes(*cap))?
            }
            (Some(cap), OomCause::Device(msg)) => write!(
                f,
                "The cap is {}; the device refused the segment: {msg}. ",
                bytes(*cap)
            )?,
            (None, OomCause::Device(msg)) => write!(
                f,
                "There is no cap; the device refused the segment: {msg}. "
            )?,
            (None, OomCause::Cap) => write!(f, "There is no cap. ")?,
        }
        write!(
            f,
            "{} is allocated by live blocks and {} is reserved by the pool but unallocated",
            bytes(self.allocated),
            bytes(self.reserved_unallocated()),
        )?;
        if let Some(host) = self.host_overflow {
            write!(f, "; {} went to host memory through overflow", bytes(host))?;
        }
        write!(
            f,
            ". Cached free segments were already released and the allocation retried. "
        )?;
        if let Some(room) = &self.residency {
            write!(f, "Blocks were evicted to host memory first, but {room}. ")?;
        }
        if let Some(held) = self.held_for_submission.filter(|&held| held > 0) {
            write!(
                f,
                "{} of the allocated bytes are dropped blocks waiting for their recorded \
                 commands to be submitted: submit through Pool::submit, or call \
                 Pool::mark_submitted after queue.submit, on the thread that recorded them \
                 (or Pool::mark_all_submitted), to free them. ",
                bytes(held)
            )?;
        }
        let segment_is_what_fails = match (self.cap, &self.cause) {
            (Some(cap), OomCause::Cap) => {
                self.segment_size > self.rounded
                    && self.reserved.saturating_add(self.rounded) <= cap
            }
            _ => false,
        };
        if segment_is_what_fails {
            match self.kind {
                SegmentKind::Large => write!(
                    f,
                    "The segment size is what does not fit: {} would fit under the cap, but a \
                     large request under 10 MiB gets a new segment of {} \
                     (large_segment_size_mb); lower large_segment_size_mb (at least 10) or \
                     raise the cap. ",
                    bytes(self.rounded),
                    bytes(self.segment_size)
                )?,
                SegmentKind::Small => write!(
                    f,
                    "The segment size is what does not fit: {} would fit under the cap, but \
                     requests of at most 1 MiB share small segments of {}; raise the cap \
                     by that much. ",
                    bytes(self.rounded),
                    bytes(self.segment_size)
                )?,
            }
        }
        if let OomCause::Device(error) = &self.cause
            && error.kind() == super::source::SourceErrorKind::AddressSpace
        {
            return write!(
                f,
                "Address space is what ran out, not memory, so a larger cap or overflow:host \
                 will not help: drop pools in pages mode you no longer need (a pool gives its \
                 ranges back once its blocks are freed and empty_cache runs, or it is \
                 dropped), serve more blocks from fewer pools, or give this pool fixed \
                 segments with expandable_segments:False, which take no address space."
            );
        }
        if self.reserved_unallocated() >= self.rounded.min(self.reserved / 8).max(1) {
            write!(
                f,
                "Reserved-but-unallocated memory is large, so fragmentation is the likely cause: \
                 try policy:compact, or max_split_size_mb (for example max_split_size_mb:128), \
                 or garbage_collection_threshold:0.8 with a cap. "
            )?;
        }
        write!(
            f,
            "Otherwise free blocks or ask for less, raise the cap (memory_limit_mb or \
             per_process_memory_fraction), or set overflow:host to spill into host memory."
        )
    }
}

impl std::error::Error for OutOfMemory {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            OomCause::Device(error) => Some(error),
            _ => None,
        }
    }
}

/// Why an allocation failed.
#[derive(Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AllocError {
    /// A request of zero bytes.
    #[error("a zero-byte allocation was requested; sizes must be at least 1 byte")]
    ZeroSize,
    /// A request above the largest block the engine can serve: the largest segment its
    /// source can create, rounded down to 512 B. A request of exactly that size is served.
    #[error(
        "requested {} ({requested} bytes), above the largest block this engine can serve, {} ({max} bytes: {limit})",
        bytes(*requested),
        bytes(*max)
    )]
    TooLarge {
        /// The caller's size (or its rounded size, if only that is too large).
        requested: u64,
        /// The largest block.
        max: u64,
        /// Where that limit comes from.
        limit: SizeLimit,
    },
    /// No memory could be found (boxed: the diagnosis is large, and errors travel in every
    /// `Result` of an allocation).
    #[error(transparent)]
    OutOfMemory(Box<OutOfMemory>),
    /// The segment source failed with an error other than out-of-memory (a validation
    /// error), or the device was lost
    /// ([`SourceErrorKind::DeviceLost`](super::source::SourceErrorKind::DeviceLost): a pool
    /// returns it from every allocation once its device is lost). The cache was not released
    /// and nothing was retried.
    #[error("{}", source_failure(.0))]
    Source(#[source] SourceError),
    /// A wgpu pool refuses allocations while more bytes of dropped blocks wait for a
    /// submission point than its held limit allows (`HeldLimitAction::Error`).
    #[error(
        "{} of dropped blocks wait for their recorded commands to be submitted, over the \
         pool's held limit of {}; no allocation is served until a submission point frees \
         them. Submit through Pool::submit, or call Pool::mark_submitted (or \
         wgpool::pool::mark_submitted(&device)) after queue.submit, on the thread that \
         recorded them; if another thread submits its command buffers, hand the recording \
         over with Pool::take_recording, or call Pool::mark_all_submitted",
        bytes(*held),
        bytes(*limit)
    )]
    HeldForSubmission {
        /// Bytes held back.
        held: u64,
        /// The pool's held limit.
        limit: u64,
    },
}

/// Why an engine could not be created.
#[derive(Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The cap cannot be computed from the configuration and the limits.
    #[error(transparent)]
    Cap(#[from] CapError),
    /// The configuration holds a value the engine cannot represent.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// `expandable_segments:True`, but the segment source cannot map pages.
    #[error(
        "expandable_segments:True needs a device that can map pages (Vulkan sparse binding), \
         and this one cannot; use expandable_segments:auto to fall back to fixed segments"
    )]
    PagesUnavailable,
}

/// Where the largest block an engine serves comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SizeLimit {
    /// The engine's own bound on a segment ([`MAX_SEGMENT_SIZE`](super::MAX_SEGMENT_SIZE)).
    Engine,
    /// The largest segment the source can create (a wgpu pool: the device's
    /// `max_buffer_size`), rounded down to 512 B.
    Source,
    /// In pages mode, the largest address range the source can reserve.
    Range,
}

impl std::fmt::Display for SizeLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SizeLimit::Engine => "the engine's largest segment",
            SizeLimit::Source => {
                "the largest segment its source can create, for a wgpu pool the device's \
                 max_buffer_size, rounded down to 512 B"
            }
            SizeLimit::Range => "the largest address range the device can reserve for pages",
        })
    }
}

/// Why a free failed. The engine is unchanged.
#[derive(Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FreeError {
    /// The block is not live: freed already, or never handed out by this engine.
    #[error(
        "block {0:?} is not a live block of this engine (already freed, or from another engine)"
    )]
    NotLive(BlockId),
}

crate::error_debug::debug_as_message!(AllocError, EngineError, FreeError);

/// `AllocError::Source`'s message: a lost device is said as it is, anything else as the
/// source's failure.
fn source_failure(error: &SourceError) -> String {
    if error.kind() == super::source::SourceErrorKind::DeviceLost {
        error.to_string()
    } else {
        format!("the segment source failed: {error}")
    }
}
