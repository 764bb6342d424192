//! Size classes of staging buffers.
//!
//! A staging buffer is created at the size of its class and cached under it, so buffers are
//! reused across requests of slightly different sizes:
//! - up to the chunk size: the next power of two, at least [`MIN_CLASS`] (64 KiB);
//! - above it (user staging buffers only; transfers are cut into chunks): the next multiple
//!   of the chunk size.

/// The smallest staging buffer: 64 KiB.
pub const MIN_CLASS: u64 = 64 << 10;

/// The class, and so the buffer size, of a staging buffer that must hold `size` bytes.
///
/// ```
/// use wgpool::staging::size_class;
/// let chunk = 64 << 20;
/// assert_eq!(size_class(1, chunk), 64 << 10);
/// assert_eq!(size_class(100_000, chunk), 128 << 10);
/// assert_eq!(size_class(64 << 20, chunk), 64 << 20);
/// assert_eq!(size_class((64 << 20) + 1, chunk), 128 << 20);
/// assert_eq!(size_class(1 << 30, chunk), 1 << 30);
/// ```
pub fn size_class(size: u64, chunk_size: u64) -> u64 {
    let size = size.max(MIN_CLASS);
    if size <= chunk_size {
        size.next_power_of_two()
    } else {
        size.div_ceil(chunk_size) * chunk_size
    }
}

/// The byte ranges, relative to the transfer's start, of the chunks of a transfer of `len`
/// bytes, and the class their staging buffers come from.
///
/// A transfer up to `chunk_size` is one chunk in the class of its length; a longer one is
/// cut into `chunk_size` pieces (the last may be shorter), all in the class `chunk_size`, so
/// that every piece reuses the same cached buffers.
pub(crate) fn chunks(len: u64, chunk_size: u64) -> (u64, Vec<std::ops::Range<u64>>) {
    if len <= chunk_size {
        return (
            size_class(len, chunk_size),
            std::iter::once(0..len).collect(),
        );
    }
    let ranges = (0..len.div_ceil(chunk_size))
        .map(|i| i * chunk_size..((i + 1) * chunk_size).min(len))
        .collect();
    (chunk_size, ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_tile_the_transfer() {
        let chunk = 1 << 20;
        for len in [1, 4, 65535, 1 << 20, (1 << 20) + 1, 5 << 20, (5 << 20) - 3] {
            let (class, ranges) = chunks(len, chunk);
            assert!(class >= MIN_CLASS && class <= chunk);
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges.last().unwrap().end, len);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
            }
            assert!(
                ranges
                    .iter()
                    .all(|r| r.end - r.start <= class && r.end > r.start)
            );
        }
    }

    #[test]
    fn classes_are_monotonic_and_cover() {
        let chunk = 1 << 20;
        let mut last = 0;
        for size in (1..(4u64 << 20)).step_by(4093) {
            let class = size_class(size, chunk);
            assert!(class >= size && class >= last);
            last = class;
        }
    }
}
