//! `roundup_power2_divisions`: how finely sizes are rounded between two powers of two.

/// Largest number of divisions accepted for one interval.
pub const MAX_DIVISIONS: u32 = 1024;

/// Division counts by request size.
///
/// With `N` divisions, a size between two powers of two `2^k < size < 2^(k+1)` is rounded
/// up to the next multiple of `2^k / N`; powers of two stay as they are. One or zero
/// divisions means no rounding beyond the 512 B granule.
///
/// The list form `[256:1,512:2,>:8]` is read as PyTorch's documentation states it: each
/// `K:N` entry covers sizes below `K` MiB and at or above the previous key, the first entry
/// also covers everything below it, and `>:N` covers sizes at or above the last key. (PyTorch
/// 2.x's parser indexes its table so that a key `K` covers `[K, 2K)` MiB instead; wgpool
/// follows the documented meaning and says so here and in the README.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundupDivisions {
    /// `(upper bound in bytes, divisions)` in increasing bound order.
    bounded: Vec<(u64, u32)>,
    /// Divisions for sizes at or above the last bound (or for every size if `bounded` is
    /// empty).
    rest: u32,
    /// Whether the value was written in list form, to render it back the same way.
    list_form: bool,
}

impl RoundupDivisions {
    /// No division rounding.
    pub fn none() -> Self {
        RoundupDivisions {
            bounded: Vec::new(),
            rest: 0,
            list_form: false,
        }
    }

    /// The same number of divisions for every size.
    pub fn uniform(divisions: u32) -> Self {
        RoundupDivisions {
            bounded: Vec::new(),
            rest: divisions,
            list_form: false,
        }
    }

    /// Per-interval divisions: `bounds` are `(upper bound in MiB, divisions)` with increasing
    /// bounds; `rest` applies at or above the last bound. `rest: None` repeats the last
    /// entry's divisions, as an absent `>` entry does in the list form.
    pub(crate) fn from_list(bounds: Vec<(u64, u32)>, rest: Option<u32>) -> Self {
        let rest = rest.or_else(|| bounds.last().map(|&(_, d)| d)).unwrap_or(0);
        let bounded = bounds.into_iter().map(|(mb, d)| (mb << 20, d)).collect();
        RoundupDivisions {
            bounded,
            rest,
            list_form: true,
        }
    }

    /// Divisions that apply to a request of `size` bytes.
    #[inline]
    pub fn divisions_for(&self, size: u64) -> u32 {
        for &(bound, divisions) in &self.bounded {
            if size < bound {
                return divisions;
            }
        }
        self.rest
    }

    /// True when no size gets more than one division.
    pub fn is_none(&self) -> bool {
        self.rest <= 1 && self.bounded.iter().all(|&(_, d)| d <= 1)
    }

    /// The value in `WGPOOL_CONF` syntax.
    pub fn render(&self) -> String {
        if !self.list_form {
            return self.rest.to_string();
        }
        let mut parts: Vec<String> = self
            .bounded
            .iter()
            .map(|&(bound, d)| format!("{}:{}", bound >> 20, d))
            .collect();
        parts.push(format!(">:{}", self.rest));
        format!("[{}]", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_entries_cover_sizes_below_their_key() {
        let d = RoundupDivisions::from_list(vec![(256, 1), (512, 2), (1024, 4)], Some(8));
        assert_eq!(d.divisions_for(1 << 20), 1);
        assert_eq!(d.divisions_for((256 << 20) - 1), 1);
        assert_eq!(d.divisions_for(300 << 20), 2);
        assert_eq!(d.divisions_for(600 << 20), 4);
        assert_eq!(d.divisions_for(1024 << 20), 8);
        assert_eq!(d.divisions_for(5 << 30), 8);
    }

    #[test]
    fn missing_rest_repeats_last_entry() {
        let d = RoundupDivisions::from_list(vec![(64, 2)], None);
        assert_eq!(d.divisions_for(1 << 30), 2);
    }
}
