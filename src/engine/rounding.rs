//! Request rounding, the choice of segment kind and new-segment sizes (PyTorch's `round_size`,
//! `get_pool` and `get_allocation_size`).

use crate::config::Config;

/// Every block size and offset is a multiple of this (PyTorch's `kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Requests up to this rounded size are of the small kind (`kSmallSize`).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size for requests of the small kind (`kSmallBuffer`).
pub const SMALL_SEGMENT_SIZE: u64 = 2 << 20;
/// Requests of the large kind below this get a `large_segment_size` segment (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Larger segments are rounded up to a multiple of this (`kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 << 20;

/// The two kinds of segment, and of the blocks carved from them: PyTorch's small pool and
/// large pool. Each kind has its own segments and its own free blocks; statistics keep them
/// apart under PyTorch's names (`small_pool`, `large_pool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SegmentKind {
    /// Rounded requests up to 1 MiB, carved from 2 MiB segments.
    Small,
    /// Everything larger.
    Large,
}

impl SegmentKind {
    /// The kind that serves a rounded request size.
    #[inline]
    pub fn for_size(rounded: u64) -> SegmentKind {
        if rounded <= SMALL_SIZE {
            SegmentKind::Small
        } else {
            SegmentKind::Large
        }
    }

    /// Index into per-kind arrays: 0 small, 1 large.
    #[inline]
    pub fn index(self) -> usize {
        match self {
            SegmentKind::Small => 0,
            SegmentKind::Large => 1,
        }
    }

    /// PyTorch's name for the kind in statistic keys (`small_pool`, `large_pool`).
    pub fn stat_name(self) -> &'static str {
        match self {
            SegmentKind::Small => "small_pool",
            SegmentKind::Large => "large_pool",
        }
    }
}

#[inline]
fn round_up(size: u64, multiple: u64) -> u64 {
    size.div_ceil(multiple) * multiple
}

/// Rounds `size` up to the next of `divisions` equal steps between the powers of two around
/// it. Powers of two are returned unchanged.
#[inline]
pub fn round_to_power2_division(size: u64, divisions: u32) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> divisions.trailing_zeros();
    if step == 0 {
        return floor << 1;
    }
    round_up(size, step)
}

/// The size a request is served with: at least 512 B, a multiple of 512 B, and rounded to
/// the configured power-of-two divisions.
#[inline]
pub fn round_request(config: &Config, size: u64) -> u64 {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    let bypass = config.roundup_bypass_threshold.is_some_and(|t| size > t);
    let divisions = if bypass {
        0
    } else {
        config.roundup_power2_divisions.divisions_for(size)
    };
    if divisions > 1 && size > MIN_BLOCK_SIZE * divisions as u64 {
        round_to_power2_division(size, divisions)
    } else {
        round_up(size, MIN_BLOCK_SIZE)
    }
}

/// The size of a new segment made for a rounded request.
#[inline]
pub fn segment_size_for(config: &Config, rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_SEGMENT_SIZE
    } else if rounded < MIN_LARGE_ALLOC {
        config.large_segment_size
    } else {
        round_up(rounded, ROUND_LARGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_requests_round_to_512() {
        let c = Config::default();
        assert_eq!(round_request(&c, 1), 512);
        assert_eq!(round_request(&c, 512), 512);
        assert_eq!(round_request(&c, 513), 1024);
        assert_eq!(round_request(&c, 1200), 1536);
    }

    #[test]
    fn divisions_round_between_powers_of_two() {
        assert_eq!(round_to_power2_division(1200, 4), 1280);
        assert_eq!(round_to_power2_division(1024, 4), 1024);
        assert_eq!(round_to_power2_division(5 << 20, 2), 6 << 20);
        assert_eq!(round_to_power2_division(3, 8), 4);
    }

    #[test]
    fn divisions_never_break_the_512_byte_granule() {
        let c = Config::parse("roundup_power2_divisions:4").unwrap();
        // 1200 B lies below 512 B * 4, so only the 512 B rounding applies.
        assert_eq!(round_request(&c, 1200), 1536);
        assert_eq!(round_request(&c, 2500 << 10), 2560 << 10);
        let bypass =
            Config::parse("roundup_power2_divisions:4,roundup_bypass_threshold_mb:2").unwrap();
        assert_eq!(round_request(&bypass, 2500 << 10), 2500 << 10);
    }

    #[test]
    fn segment_sizes_follow_pytorch() {
        let c = Config::default();
        assert_eq!(segment_size_for(&c, 512), 2 << 20);
        assert_eq!(segment_size_for(&c, 1 << 20), 2 << 20);
        assert_eq!(segment_size_for(&c, (1 << 20) + 512), 20 << 20);
        assert_eq!(segment_size_for(&c, 10 << 20), 10 << 20);
        assert_eq!(segment_size_for(&c, (10 << 20) + 512), 12 << 20);
    }
}
