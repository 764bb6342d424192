//! Byte units for axes.

/// The binary unit that suits `max` bytes: (divisor, name).
pub(crate) fn byte_unit(max: u64) -> (f64, &'static str) {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (size, name) in UNITS {
        if max >= size {
            return (size as f64, name);
        }
    }
    (1.0, "B")
}
