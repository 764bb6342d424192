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
