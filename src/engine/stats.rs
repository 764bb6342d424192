//! `memory_stats`: PyTorch's statistics, with the same keys and meanings.

use std::collections::BTreeMap;

use super::rounding::SegmentKind;

/// One statistic: its current value, its peak since the last reset, and the totals added
/// and removed since the last accumulated reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// Current value.
    pub current: u64,
    /// Largest `current` since creation or [`reset_peak`](Stat::reset_peak).
    pub peak: u64,
    /// Sum of all increases.
    pub allocated: u64,
    /// Sum of all decreases.
    pub freed: u64,
}

impl Stat {
    #[inline]
    pub(crate) fn increase(&mut self, amount: u64) {
        self.current += amount;
        self.allocated += amount;
        self.peak = self.peak.max(self.current);
    }

    #[inline]
    pub(crate) fn decrease(&mut self, amount: u64) {
        debug_assert!(self.current >= amount, "statistic would go negative");
        self.current -= amount;
        self.freed += amount;
    }

    /// Counts `amount` as allocated and freed again, leaving current and peak as they are.
    #[inline]
    pub(crate) fn add_round_trip(&mut self, amount: u64) {
        self.allocated += amount;
        self.freed += amount;
    }

    /// Sets the peak to the current value.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    /// Zeroes the accumulated totals.
    pub fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// A statistic kept for all pools together and for each pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatArray {
    /// Both pools.
    pub all: Stat,
    /// Blocks of rounded size up to 1 MiB.
    pub small_pool: Stat,
    /// Larger blocks.
    pub large_pool: Stat,
}

impl StatArray {
    #[inline]
    pub(crate) fn increase(&mut self, kind: SegmentKind, amount: u64) {
        self.all.increase(amount);
        self.pool_mut(kind).increase(amount);
    }

    #[inline]
    pub(crate) fn decrease(&mut self, kind: SegmentKind, amount: u64) {
        self.all.decrease(amount);
        self.pool_mut(kind).decrease(amount);
    }

    /// The statistic of one segment kind (PyTorch: of one pool).
    pub fn pool(&self, kind: SegmentKind) -> &Stat {
        match kind {
            SegmentKind::Small => &self.small_pool,
            SegmentKind::Large => &self.large_pool,
        }
    }

    #[inline]
    pub(crate) fn pool_mut(&mut self, kind: SegmentKind) -> &mut Stat {
        match kind {
            SegmentKind::Small => &mut self.small_pool,
            SegmentKind::Large => &mut self.large_pool,
        }
    }

    fn each_mut(&mut self) -> [&mut Stat; 3] {
        [&mut self.all, &mut self.small_pool, &mut self.large_pool]
    }
}

/// Every statistic the engine keeps. Field names are PyTorch's `memory_stats()` keys.
///
/// - `allocation`, `allocated_bytes`: live blocks and their rounded sizes.
/// - `requested_bytes`: the caller's sizes of live blocks.
/// - `segment`, `reserved_bytes`: segments and their sizes.
/// - `active`, `active_bytes`: blocks in use (equal to allocation here: there are no
///   deferred stream frees).
/// - `inactive_split`, `inactive_split_bytes`: free blocks inside partly used segments,
///   memory that `empty_cache` cannot release.
///
/// Beyond PyTorch's keys (left out of [`to_pytorch_map`](MemoryStats::to_pytorch_map)), for
/// residency in pages mode: `evicted_bytes` (pages of live blocks evicted to host memory:
/// `current` held there now, `allocated` evicted in total, `freed` restored or dropped with
/// their block), `num_evictions` and `num_restores`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Number of live blocks.
    pub allocation: StatArray,
    /// Number of segments.
    pub segment: StatArray,
    /// Number of active blocks.
    pub active: StatArray,
    /// Number of free blocks in split segments.
    pub inactive_split: StatArray,
    /// Bytes of live blocks (rounded sizes).
    pub allocated_bytes: StatArray,
    /// Bytes of segments.
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks.
    pub active_bytes: StatArray,
    /// Bytes of free blocks in split segments.
    pub inactive_split_bytes: StatArray,
    /// Bytes the callers asked for, of live blocks.
    pub requested_bytes: StatArray,
    /// Live blocks of at least `max_split_size`.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size`.
    pub oversize_segments: Stat,
    /// Allocations that needed the release-everything retry.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Segments created.
    pub num_device_alloc: u64,
    /// Segments released.
    pub num_device_free: u64,
    /// Times every cached segment was released at once (`empty_cache`, and the retry of an
    /// allocation that missed): PyTorch synchronizes all streams each time.
    pub num_sync_all_streams: u64,
    /// Bytes of live blocks' pages evicted (not a PyTorch key): unmapped on the device, their
    /// contents in host memory. `reserved_bytes` does not count them.
    pub evicted_bytes: StatArray,
    /// Blocks evicted (not a PyTorch key).
    pub num_evictions: u64,
    /// Evicted blocks restored (not a PyTorch key).
    pub num_restores: u64,
}

/// The keys of [`MemoryStats::to_map`] that PyTorch's dictionary does not have.
const WGPOOL_ONLY: [&str; 3] = ["evicted_bytes.", "num_evictions", "num_restores"];

impl MemoryStats {
    /// These statistics with `active` and `active_bytes` filled in. Blocks are active
    /// exactly while they are allocated (there are no deferred stream frees), so the engine
    /// keeps only `allocation` and `allocated_bytes` on its hot path and copies them into
    /// the two on every read: every reader of the statistics goes through this.
    #[inline]
    pub(crate) fn with_active(mut self) -> MemoryStats {
        self.active = self.allocation;
        self.active_bytes = self.allocated_bytes;
        self
    }

    fn arrays(&self) -> [(&'static str, &StatArray); 9] {
        [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ]
    }

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// The statistics as PyTorch's flat dictionary: `"allocated_bytes.all.current"`,
    /// `"oversize_segments.peak"`, `"num_ooms"` and so on.
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        let mut map = BTreeMap::new();
        let mut put = |prefix: String, stat: &Stat| {
            map.insert(format!("{prefix}.current"), stat.current);
            map.insert(format!("{prefix}.peak"), stat.peak);
            map.insert(format!("{prefix}.allocated"), stat.allocated);
            map.insert(format!("{prefix}.freed"), stat.freed);
        };
        for (name, array) in self.arrays() {
            put(format!("{name}.all"), &array.all);
            put(format!("{name}.small_pool"), &array.small_pool);
            put(format!("{name}.large_pool"), &array.large_pool);
        }
        put("oversize_allocations".into(), &self.oversize_allocations);
        put("oversize_segments".into(), &self.oversize_segments);
        put("evicted_bytes.all".into(), &self.evicted_bytes.all);
        put(
            "evicted_bytes.small_pool".into(),
            &self.evicted_bytes.small_pool,
        );
        put(
            "evicted_bytes.large_pool".into(),
            &self.evicted_bytes.large_pool,
        );
        map.insert("num_alloc_retries".into(), self.num_alloc_retries);
        map.insert("num_ooms".into(), self.num_ooms);
        map.insert("num_device_alloc".into(), self.num_device_alloc);
        map.insert("num_device_free".into(), self.num_device_free);
        map.insert("num_sync_all_streams".into(), self.num_sync_all_streams);
        map.insert("num_evictions".into(), self.num_evictions);
        map.insert("num_restores".into(), self.num_restores);
        map
    }

    /// Exactly the dictionary `torch.cuda.memory_stats()` returns: every key of
    /// [`to_map`](MemoryStats::to_map), plus `max_split_size`, which PyTorch reports as the
    /// configured `max_split_size_mb` in bytes, or -1 when it is unlimited. Values are signed,
    /// as PyTorch's are.
    pub fn to_pytorch_map(&self, max_split_size: Option<u64>) -> BTreeMap<String, i64> {
        let mut map: BTreeMap<String, i64> = self
            .to_map()
            .into_iter()
            .filter(|(key, _)| !WGPOOL_ONLY.iter().any(|only| key.starts_with(only)))
            .map(|(key, value)| (key, i64::try_from(value).unwrap_or(i64::MAX)))
            .collect();
        let max_split = max_split_size.map_or(-1, |m| i64::try_from(m).unwrap_or(i64::MAX));
        map.insert("max_split_size".into(), max_split);
        map
    }

    /// Sets every peak to its current value (PyTorch's `reset_peak_memory_stats`).
    pub fn reset_peak(&mut self) {
        for array in self.arrays_mut() {
            for stat in array.each_mut() {
                stat.reset_peak();
            }
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
        for stat in self.evicted_bytes.each_mut() {
            stat.reset_peak();
        }
    }

    /// Zeroes every accumulated total and counter (PyTorch's
    /// `reset_accumulated_memory_stats`).
    pub fn reset_accumulated(&mut self) {
        for array in self.arrays_mut() {
            for stat in array.each_mut() {
                stat.reset_accumulated();
            }
        }
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
        self.num_sync_all_streams = 0;
        for stat in self.evicted_bytes.each_mut() {
            stat.reset_accumulated();
        }
        self.num_evictions = 0;
        self.num_restores = 0;
    }

    /// The current values only, for comparing against a recount.
    pub fn currents(&self) -> Vec<(&'static str, [u64; 3])> {
        let mut out: Vec<(&'static str, [u64; 3])> = self
            .arrays()
            .iter()
            .map(|(name, a)| {
                (
                    *name,
                    [a.all.current, a.small_pool.current, a.large_pool.current],
                )
            })
            .collect();
        out.push((
            "oversize_allocations",
            [self.oversize_allocations.current, 0, 0],
        ));
        out.push(("oversize_segments", [self.oversize_segments.current, 0, 0]));
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::engine::{Engine, EngineLimits, SegmentKind, VirtualSegments};

    /// `active` and `active_bytes` are not kept on the hot path: every way of reading the
    /// statistics (the struct, PyTorch's map, the summary) shows them equal to `allocation`
    /// and `allocated_bytes`, peaks and totals included, through allocations, frees, blocks
    /// served by the pool's reuse cache and a reset of the peaks.
    #[test]
    fn active_statistics_read_as_the_allocated_ones() {
        let mut engine = Engine::new(Config::default(), EngineLimits::unlimited()).unwrap();
        let mut device = VirtualSegments::unlimited();
        let a = engine.allocate(1000, 0, &mut device).unwrap();
        let b = engine.allocate(3 << 20, 0, &mut device).unwrap();
        engine.free(a.block, &mut device).unwrap();
        engine.record_reuse(SegmentKind::Large, 2, 8 << 20, 6 << 20, 0);
        engine.reset_peak_stats();
        let c = engine.allocate(5000, 0, &mut device).unwrap();
        let stats = engine.memory_stats();
        assert_eq!(stats.active, stats.allocation);
        assert_eq!(stats.active_bytes, stats.allocated_bytes);
        assert_eq!(stats.active.all.current, 2);
        assert_eq!(stats.active.all.allocated, 5);
        assert_eq!(stats.active_bytes.all.freed, 1024 + (8 << 20));
        let map = engine.pytorch_memory_stats();
        for (active, allocated) in [
            ("active.all.current", "allocation.all.current"),
            (
                "active.large_pool.allocated",
                "allocation.large_pool.allocated",
            ),
            ("active_bytes.all.peak", "allocated_bytes.all.peak"),
            (
                "active_bytes.small_pool.freed",
                "allocated_bytes.small_pool.freed",
            ),
        ] {
            assert_eq!(map[active], map[allocated], "{active}");
        }
        assert_eq!(map["active.all.current"], 2);
        let summary = engine.memory_summary();
        let row = |name: &str| {
            summary
                .lines()
                .find(|line| line.contains(name))
                .unwrap_or_else(|| panic!("no `{name}` row in\n{summary}"))
                .split('|')
                .skip(2)
                .collect::<Vec<_>>()
                .join("|")
        };
        assert_eq!(row("Active memory"), row("Allocated memory"));
        assert_eq!(row("Active allocs"), row("Allocations"));
        engine.free(b.block, &mut device).unwrap();
        engine.free(c.block, &mut device).unwrap();
        let stats = engine.memory_stats();
        assert_eq!(
            (stats.active, stats.active_bytes),
            (stats.allocation, stats.allocated_bytes)
        );
        assert_eq!(stats.active.all.current, 0);
    }
}
