//! Human-readable byte counts, and input quoted visibly, for messages and tables.

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
/// what [`visible`] escapes escaped and quotes escaped too, so that a label can neither break
/// a line of a report nor pass for report text.
///
/// ```
/// assert_eq!(wgpool::format::quoted("weights"), "\"weights\"");
/// assert_eq!(wgpool::format::quoted("a\"b\nc"), r#""a\"b\nc""#);
/// ```
pub fn quoted(text: &str) -> String {
    format!("\"{}\"", visible(text).replace('"', "\\\""))
}

/// `text` as an error message quotes it: every character a reader could not see escaped as
/// Rust writes it (`\u{feff}` for a byte-order mark, `\u{200b}`, `\t`, `\u{a0}` for a
/// no-break space), and backslashes doubled so that an escape written in the input reads as
/// itself. Quotes are kept.
///
/// ```
/// use wgpool::format::visible;
/// assert_eq!(visible("\u{feff}alloc"), "\\u{feff}alloc");
/// assert_eq!(visible("1\t2 \"é\""), "1\\t2 \"é\"");
/// assert_eq!(visible("a\\u{feff}"), "a\\\\u{feff}");
/// ```
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' | '"' => out.push(c),
            // Hangul fillers: printable to Unicode, yet drawn as nothing.
            '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}' => out.extend(c.escape_unicode()),
            c => out.extend(c.escape_debug()),
        }
    }
    out
}
