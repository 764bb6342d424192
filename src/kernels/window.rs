//! Splitting an operand range into binding windows.

/// Splits `size` bytes into consecutive windows `(start, length)` of at most `window` bytes.
///
/// Guarantees, for `window` a multiple of `granule`, `granule` a multiple of 16 and
/// `window >= 2 * granule`:
/// - the windows cover `0..size` exactly, in order, without overlap;
/// - every window starts at a multiple of `granule` (so every binding offset stays aligned);
/// - every window but possibly the only one is at least 16 bytes (a vec4 binding needs 16);
/// - no window is longer than `window`.
///
/// ```
/// use wgpool::kernels::split_windows;
/// assert_eq!(split_windows(100, 64, 32), vec![(0, 64), (64, 36)]);
/// // A 4-byte remainder borrows one granule from the window before it.
/// assert_eq!(split_windows(132, 64, 32), vec![(0, 64), (64, 32), (96, 36)]);
/// assert!(split_windows(0, 64, 32).is_empty());
/// ```
pub fn split_windows(size: u64, window: u64, granule: u64) -> Vec<(u64, u64)> {
    debug_assert!(granule % 16 == 0 && window % granule == 0 && window >= 2 * granule);
    let mut windows = Vec::new();
    if size == 0 {
        return windows;
    }
    let mut start = 0;
    while size - start > window {
        windows.push((start, window));
        start += window;
    }
    let mut rest = size - start;
    if rest < 16 {
        if let Some(last) = windows.last_mut() {
            last.1 -= granule;
            start -= granule;
            rest += granule;
        }
    }
    windows.push((start, rest));
    windows
}
