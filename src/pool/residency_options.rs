//! [`ResidencyOptions`]: the budgets a pool that pages blocks to host memory keeps.

/// Turns on residency for a pool ([`PoolOptions::with_residency`](super::PoolOptions::with_residency)):
/// when its blocks do not fit the device budget, the pool evicts the least recently used ones
/// to host memory and brings them back when they are used, keeping their addresses (pages
/// mode only; see the README's "Residency").
///
/// ```
/// use wgpool::pool::{PoolOptions, ResidencyOptions};
/// let options = PoolOptions::default().with_residency(
///     ResidencyOptions::new()
///         .with_device_budget(256 << 20)
///         .with_host_limit(1 << 30),
/// );
/// assert_eq!(options.residency().and_then(|r| r.device_budget()), Some(256 << 20));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResidencyOptions {
    pub(crate) device_budget: Option<u64>,
    pub(crate) host_limit: Option<u64>,
}

impl ResidencyOptions {
    /// Residency with the default budgets: the device budget is the smallest of the pool's
    /// cap (`memory_limit_mb`, `per_process_memory_fraction`) and the device's
    /// `VK_EXT_memory_budget` budget (read by [`Pool::from_context`](super::Pool::from_context)),
    /// else the device's memory; the host limit is three quarters of the machine's memory
    /// (`MemTotal` in `/proc/meminfo`; unlimited where that cannot be read).
    pub fn new() -> ResidencyOptions {
        ResidencyOptions::default()
    }

    /// A device budget in bytes: the pool keeps at most this much device memory mapped,
    /// evicting blocks to stay under it. The smaller of it and the default budget applies.
    pub fn with_device_budget(mut self, bytes: u64) -> Self {
        self.device_budget = Some(bytes);
        self
    }

    /// The most host memory the pool's evicted, offloaded and overflow blocks may take
    /// together, in bytes. Past it, evicting fails and the request that needed room is an
    /// out-of-memory error; nothing already stored is lost.
    pub fn with_host_limit(mut self, bytes: u64) -> Self {
        self.host_limit = Some(bytes);
        self
    }

    /// The device budget given, if any.
    pub fn device_budget(&self) -> Option<u64> {
        self.device_budget
    }

    /// The host limit given, if any (`None`: the default).
    pub fn host_limit(&self) -> Option<u64> {
        self.host_limit
    }
}

/// Three quarters of the machine's memory, from `/proc/meminfo`, or `None` where it cannot be
/// read: the default host limit.
pub(crate) fn default_host_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_total(&text).map(|total| total / 4 * 3)
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line.split_whitespace().skip(1);
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_reads_kilobytes() {
        let text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total(text), Some(24_576_000 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
        assert_eq!(mem_total("MemTotal: 3 MB\n"), None);
    }
}
