//! `roundup_power2_divisions`: how finely sizes are rounded between two powers of two.

/// Largest number of divisions accepted for one interval.
pub const MAX_DIVISIONS: u32 = 1024;

/// How many intervals PyTorch's table has: sizes below 2 MiB, then one per power of two
/// from 2 MiB up, the last also covering everything from 32 GiB up.
const INTERVALS: usize = 16;

/// Division counts by request size.
///
/// With `N` divisions, a size between two powers of two `2^k < size < 2^(k+1)` is rounded
/// up to the next multiple of `2^k / N`; powers of two stay as they are. One or zero
/// divisions means no rounding beyond the 512 B granule.
///
/// The list form `[256:1,512:2,>:8]` means what PyTorch 2.11's parser makes of it (checked
/// against PyTorch on an H200; PyTorch's documentation says otherwise). PyTorch keeps one
/// count per interval `[2^k, 2^(k+1))` MiB, for `k` from 0 (which also covers every size
/// below 1 MiB) to 15 (which also covers everything above):
/// - an entry `K:N` sets the interval `[K, 2K)` MiB (keys above 32768 MiB set the last one);
/// - the first entry also sets every interval below its key;
/// - `>:N` sets every interval above the previous entry's;
/// - intervals no entry sets keep 0: 512 B rounding only.
///
/// So `[256:1,512:2,>:8]` rounds sizes below 512 MiB to 512 B only, gives 2 divisions to
/// `[512, 1024)` MiB and 8 to everything from 1 GiB up; and `[64:2]` gives 2 divisions to
/// sizes below 128 MiB and none above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundupDivisions {
    /// The list's `(key in MiB, divisions)` entries, in order, for rendering.
    entries: Vec<(u64, u32)>,
    /// The list's `>` entry, or the single count of the scalar form.
    rest: Option<u32>,
    /// Divisions per interval, as PyTorch's table holds them.
    table: [u32; INTERVALS],
    /// Whether the value was written in list form, to render it back the same way.
    list_form: bool,
}

impl RoundupDivisions {
    /// No division rounding.
    pub fn none() -> Self {
        RoundupDivisions {
            entries: Vec::new(),
            rest: None,
            table: [0; INTERVALS],
            list_form: false,
        }
    }

    /// The same number of divisions for every size.
    pub fn uniform(divisions: u32) -> Self {
        RoundupDivisions {
            entries: Vec::new(),
            rest: Some(divisions),
            table: [divisions; INTERVALS],
            list_form: false,
        }
    }

    /// Per-interval divisions from the list form: `entries` are `(key in MiB, divisions)`
    /// with power-of-two keys, and `rest` is the `>` entry, which follows them.
    pub(crate) fn from_list(entries: Vec<(u64, u32)>, rest: Option<u32>) -> Self {
        let mut table = [0; INTERVALS];
        let mut last_index = 0;
        for (position, &(mb, divisions)) in entries.iter().enumerate() {
            let index = (mb.max(1).ilog2() as usize).min(INTERVALS - 1);
            if position == 0 {
                table[..index].fill(divisions);
            }
            table[index] = divisions;
            last_index = index;
        }
        if let Some(divisions) = rest {
            table[(last_index + 1).min(INTERVALS)..].fill(divisions);
        }
        RoundupDivisions {
            entries,
            rest,
            table,
            list_form: true,
        }
    }

    /// Divisions that apply to a request of `size` bytes.
    #[inline]
    pub fn divisions_for(&self, size: u64) -> u32 {
        let log2 = size.max(1).ilog2() as usize;
        self.table[log2.saturating_sub(20).min(INTERVALS - 1)]
    }

    /// True when no size gets more than one division.
    pub fn is_none(&self) -> bool {
        self.table.iter().all(|&d| d <= 1)
    }

    /// The value in `WGPOOL_CONF` syntax.
    pub fn render(&self) -> String {
        if !self.list_form {
            return self.rest.unwrap_or(0).to_string();
        }
        let mut parts: Vec<String> = self
            .entries
            .iter()
            .map(|&(mb, d)| format!("{mb}:{d}"))
            .collect();
        if let Some(rest) = self.rest {
            parts.push(format!(">:{rest}"));
        }
        format!("[{}]", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn list_entries_set_the_interval_from_their_key_up() {
        // As PyTorch 2.11 parses `[256:1,512:2,1024:4,>:8]`.
        let d = RoundupDivisions::from_list(vec![(256, 1), (512, 2), (1024, 4)], Some(8));
        assert_eq!(d.divisions_for(1000), 1);
        assert_eq!(d.divisions_for(300 * MIB), 1);
        assert_eq!(d.divisions_for(511 * MIB), 1);
        assert_eq!(d.divisions_for(512 * MIB), 2);
        assert_eq!(d.divisions_for(1023 * MIB), 2);
        assert_eq!(d.divisions_for(1024 * MIB), 4);
        assert_eq!(d.divisions_for(2047 * MIB), 4);
        assert_eq!(d.divisions_for(2048 * MIB), 8);
        assert_eq!(d.divisions_for(100 << 30), 8);
    }

    #[test]
    fn intervals_no_entry_sets_keep_no_rounding() {
        // Without `>`, sizes above the last entry's interval are not rounded.
        let d = RoundupDivisions::from_list(vec![(64, 2)], None);
        assert_eq!(d.divisions_for(MIB), 2);
        assert_eq!(d.divisions_for(127 * MIB), 2);
        assert_eq!(d.divisions_for(128 * MIB), 0);
        // A gap between two entries is not filled either.
        let d = RoundupDivisions::from_list(vec![(4, 2), (64, 8)], None);
        assert_eq!(d.divisions_for(5 * MIB), 2);
        assert_eq!(d.divisions_for(8 * MIB), 0);
        assert_eq!(d.divisions_for(64 * MIB), 8);
        // Keys beyond 32 GiB all set the last interval.
        let d = RoundupDivisions::from_list(vec![(1, 1), (1 << 20, 4)], None);
        assert_eq!(d.divisions_for(32 << 30), 4);
        assert_eq!(d.divisions_for(16 << 30), 0);
    }

    #[test]
    fn renders_what_was_written() {
        let d = RoundupDivisions::from_list(vec![(64, 2)], None);
        assert_eq!(d.render(), "[64:2]");
        let d = RoundupDivisions::from_list(vec![(256, 1), (512, 2)], Some(8));
        assert_eq!(d.render(), "[256:1,512:2,>:8]");
        assert_eq!(RoundupDivisions::uniform(4).render(), "4");
    }
}
