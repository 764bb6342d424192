//! Human-readable byte counts for messages and tables.

/// Formats a byte count with a binary unit: `512 B`, `1.50 KiB`, `20.00 MiB`, `8.74 GiB`.
///
/// ```
/// assert_eq!(wgpool::format::bytes(512), "512 B");
/// assert_eq!(wgpool::format::bytes(3 << 19), "1.50 MiB");
/// ```
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

/// A count with its noun in the right number: `1 block`, `3 blocks`, `0 blocks`.
///
/// ```
/// assert_eq!(wgpool::format::count(1, "block", "blocks"), "1 block");
/// assert_eq!(wgpool::format::count(2, "block", "blocks"), "2 blocks");
/// ```
pub fn count(n: u64, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

/// A user-given text (a block label) quoted for a one-line message: in double quotes, with
/// quotes, backslashes, newlines and other control characters escaped as in Rust literals, so
/// that a label cannot break a line of a report or pass for report text.
///
/// ```
/// assert_eq!(wgpool::format::quoted("weights"), "\"weights\"");
/// assert_eq!(wgpool::format::quoted("a\"b\nc"), r#""a\"b\nc""#);
/// ```
pub fn quoted(text: &str) -> String {
    format!("{text:?}")
}
