//! The model both harnesses keep of the engine: the live blocks as `allocate` returned them,
//! recently freed ids, the peaks of the model's totals and the out-of-memory count; the
//! checks of the engine against it that hold in every memory mode; and the operations, the
//! run of a sequence and the random runner that both harnesses share ([`Harness`]).

use std::cell::Cell;
use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

use wgpool::config::Config;
use wgpool::engine::rounding::MIN_BLOCK_SIZE;
use wgpool::engine::{
    AllocError, Allocation, BlockId, Engine, FreeError, MemoryStats, SegmentKind, SegmentSnapshot,
    Stat, StatArray, VirtualSegments,
};

use crate::inputs::{Op, op_strategy};

/// Totals over all cases of one test, to show what the random runs exercised.
#[derive(Default, Debug)]
pub struct Tally {
    pub cases: Cell<u64>,
    /// Operations of the sequences (a burst of frees is one).
    pub ops: Cell<u64>,
    pub allocs: Cell<u64>,
    pub cache_hits: Cell<u64>,
    pub new_segments: Cell<u64>,
    pub releases_during_alloc: Cell<u64>,
    pub ooms: Cell<u64>,
    pub recoveries: Cell<u64>,
    pub too_large: Cell<u64>,
    pub stale_refused: Cell<u64>,
    pub max_live: Cell<u64>,
}

pub fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// The cap on reserved memory computed from the options, independently of the engine.
pub fn expected_cap(config: &Config, device_memory: Option<u64>) -> Option<u64> {
    let from_fraction = match (config.per_process_memory_fraction, device_memory) {
        (Some(f), Some(total)) => Some((f * total as f64) as u64),
        _ => None,
    };
    match (from_fraction, config.memory_limit) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn stat_arrays(s: &MemoryStats) -> [(&'static str, StatArray); 9] {
    [
        ("allocation", s.allocation),
        ("segment", s.segment),
        ("active", s.active),
        ("inactive_split", s.inactive_split),
        ("allocated_bytes", s.allocated_bytes),
        ("reserved_bytes", s.reserved_bytes),
        ("active_bytes", s.active_bytes),
        ("inactive_split_bytes", s.inactive_split_bytes),
        ("requested_bytes", s.requested_bytes),
    ]
}

fn pool_stat(array: &mut StatArray, kind: SegmentKind) -> &mut Stat {
    match kind {
        SegmentKind::Small => &mut array.small_pool,
        SegmentKind::Large => &mut array.large_pool,
    }
}

/// A statistic's peak is at least its current value, and its current value is what was
/// allocated less what was freed.
pub fn check_stat(name: &str, s: &Stat) -> Result<(), String> {
    ensure!(
        s.peak >= s.current,
        "{name}: peak {} < current {}",
        s.peak,
        s.current
    );
    ensure!(
        s.allocated >= s.freed && s.allocated - s.freed == s.current,
        "{name}: allocated {} - freed {} != current {}",
        s.allocated,
        s.freed,
        s.current
    );
    Ok(())
}

/// After `reset_peak_stats`, every peak equals its current value.
fn check_peaks_reset(stats: &MemoryStats) -> Result<(), String> {
    let map = stats.to_map();
    for (key, value) in &map {
        if let Some(stem) = key.strip_suffix(".peak") {
            let current = map[&format!("{stem}.current")];
            ensure!(
                *value == current,
                "after reset_peak_stats: {key} is {value}, current {current}"
            );
        }
    }
    Ok(())
}

/// A block of a layout or of the model: (segment, offset, size, requested).
type PlacedBlock = (u32, u64, u64, u64);

/// What [`Model::check_live`] read from the engine and summed over the live blocks.
pub struct Checked {
    pub snapshot: Vec<SegmentSnapshot>,
    pub stats: MemoryStats,
    /// Bytes of the live blocks.
    pub allocated: u64,
    /// Bytes the live blocks' requests asked for.
    pub requested: u64,
}

/// The engine, its simulated device, and what the model knows of them.
pub struct Model<'a> {
    pub engine: Engine,
    pub device: VirtualSegments,
    pub config: Config,
    /// The cap the options give, computed here.
    pub cap: Option<u64>,
    /// The simulated device's limit, if any.
    pub device_limit: Option<u64>,
    /// What `allocate` returned for every live block.
    pub live: Vec<Allocation>,
    /// Recently freed ids.
    pub stale: Vec<BlockId>,
    /// Peaks of the model's totals since the last reset: allocated and requested bytes, and
    /// reserved bytes (segments) or mapped bytes (pages) after an operation.
    pub peak_allocated: u64,
    pub peak_requested: u64,
    pub peak_reserved: u64,
    /// Out-of-memory errors the engine should have counted.
    pub ooms: u64,
    pub tally: &'a Tally,
}

impl<'a> Model<'a> {
    pub fn new(
        engine: Engine,
        device: VirtualSegments,
        config: Config,
        cap: Option<u64>,
        device_limit: Option<u64>,
        tally: &'a Tally,
    ) -> Model<'a> {
        Model {
            engine,
            device,
            config,
            cap,
            device_limit,
            live: Vec::new(),
            stale: Vec::new(),
            peak_allocated: 0,
            peak_requested: 0,
            peak_reserved: 0,
            ooms: 0,
            tally,
        }
    }

    pub fn is_oversize(&self, size: u64) -> bool {
        self.config.max_split_size.is_some_and(|m| size >= m)
    }

    /// Frees the live block at `index` and remembers its id as stale; returns it.
    pub fn free(&mut self, index: usize) -> Result<Allocation, String> {
        let a = self.live.swap_remove(index);
        self.engine
            .free(a.block, &mut self.device)
            .map_err(|e| format!("free({a:?}) failed: {e}"))?;
        self.stale.push(a.block);
        if self.stale.len() > 32 {
            self.stale.remove(0);
        }
        Ok(a)
    }

    /// The checks of every memory mode, after an operation: the engine's own recount; the
    /// layout's allocated blocks are exactly the model's live blocks, unchanged, aligned,
    /// inside their `region` (segment or range) and its pool, not overlapping; the
    /// statistics of live blocks, oversize blocks and out-of-memory errors equal the
    /// model's; every statistic is consistent.
    pub fn check_live(&mut self, after: &str, region: &str) -> Result<Checked, String> {
        self.engine
            .check_invariants()
            .map_err(|e| format!("after {after}: check_invariants: {e}"))?;
        let snapshot = self.engine.snapshot();
        let stats = self.engine.memory_stats();

        // Every allocated block in the layout is exactly one of the model's live blocks.
        let mut segment_of: HashMap<u32, &SegmentSnapshot> = HashMap::new();
        let mut in_layout: Vec<PlacedBlock> = Vec::new();
        for segment in &snapshot {
            segment_of.insert(segment.id.0, segment);
            for b in segment.blocks.iter().filter(|b| b.allocated) {
                in_layout.push((segment.id.0, b.offset, b.size, b.requested));
            }
        }
        let mut in_model: Vec<PlacedBlock> = self
            .live
            .iter()
            .map(|a| (a.segment.0, a.offset, a.block_size, a.requested))
            .collect();
        in_layout.sort_unstable();
        in_model.sort_unstable();
        ensure!(
            in_layout == in_model,
            "after {after}: the layout's allocated blocks differ from the live blocks\n  layout {in_layout:?}\n  model  {in_model:?}"
        );
        // No two live blocks overlap.
        for pair in in_model.windows(2) {
            let (s0, o0, z0, _) = pair[0];
            let (s1, o1, _, _) = pair[1];
            ensure!(
                s0 != s1 || o0 + z0 <= o1,
                "after {after}: live blocks overlap in {region} {s0}: {o0}+{z0} and {o1}"
            );
        }

        // Live blocks: unchanged, aligned, inside their region, large enough.
        // Per segment kind: (blocks, allocated bytes, requested bytes).
        let mut totals = [(0u64, 0u64, 0u64); 2];
        for a in &self.live {
            let now = self.engine.allocation(a.block);
            ensure!(
                now == Some(*a),
                "after {after}: live block changed: allocate returned {a:?}, now {now:?}"
            );
            let segment = segment_of
                .get(&a.segment.0)
                .ok_or_else(|| format!("after {after}: {a:?} is in no {region}"))?;
            ensure!(
                a.offset % MIN_BLOCK_SIZE == 0 && a.block_size % MIN_BLOCK_SIZE == 0,
                "after {after}: {a:?} is not 512 B aligned"
            );
            ensure!(
                a.block_size >= a.requested,
                "after {after}: {a:?} is smaller than asked"
            );
            ensure!(
                a.offset + a.block_size <= segment.size,
                "after {after}: {a:?} ends past its {region} of {} bytes",
                segment.size
            );
            ensure!(
                segment.kind == a.kind,
                "after {after}: {a:?} lies in a {:?} {region}",
                segment.kind
            );
            let t = &mut totals[a.kind.index()];
            t.0 += 1;
            t.1 += a.block_size;
            t.2 += a.requested;
        }

        // The current allocation, allocated, requested and active statistics, overall and
        // per pool, equal the live blocks' totals.
        let count = totals[0].0 + totals[1].0;
        let allocated = totals[0].1 + totals[1].1;
        let requested = totals[0].2 + totals[1].2;
        let got = (
            stats.allocation.all.current,
            stats.allocated_bytes.all.current,
            stats.requested_bytes.all.current,
        );
        ensure!(
            got == (count, allocated, requested),
            "after {after}: statistics say {got:?} (allocations, allocated, requested); the live \
             blocks {count}, {allocated}, {requested}"
        );
        for kind in [SegmentKind::Small, SegmentKind::Large] {
            let t = totals[kind.index()];
            let got = (
                stats.allocation.pool(kind).current,
                stats.allocated_bytes.pool(kind).current,
                stats.requested_bytes.pool(kind).current,
            );
            ensure!(
                got == t,
                "after {after}: {kind:?} statistics {got:?} != model {t:?}"
            );
        }
        ensure!(
            stats.active.all.current == count && stats.active_bytes.all.current == allocated,
            "after {after}: active stats differ from the live blocks"
        );

        // Every statistic adds up.
        for (name, array) in stat_arrays(&stats) {
            ensure!(
                array.all.current == array.small_pool.current + array.large_pool.current,
                "after {after}: {name}: all != small + large"
            );
            check_stat(&format!("{name}.all"), &array.all)?;
            check_stat(&format!("{name}.small_pool"), &array.small_pool)?;
            check_stat(&format!("{name}.large_pool"), &array.large_pool)?;
        }
        check_stat("oversize_allocations", &stats.oversize_allocations)?;
        let oversize_live = self
            .live
            .iter()
            .filter(|a| self.is_oversize(a.block_size))
            .count() as u64;
        ensure!(
            stats.oversize_allocations.current == oversize_live,
            "after {after}: oversize_allocations {} != {oversize_live}",
            stats.oversize_allocations.current
        );
        ensure!(
            stats.num_ooms == self.ooms && stats.num_alloc_retries >= stats.num_ooms,
            "after {after}: num_ooms {} (expected {}), num_alloc_retries {}",
            stats.num_ooms,
            self.ooms,
            stats.num_alloc_retries
        );
        self.tally
            .max_live
            .set(self.tally.max_live.get().max(count));
        Ok(Checked {
            snapshot,
            stats,
            allocated,
            requested,
        })
    }

    /// Peaks: allocated and requested bytes change once per operation, so their peaks are
    /// the largest values seen after an operation. Reserved memory can also move inside
    /// one operation, so its peak is at least the largest `reserved` seen after one, and
    /// equal to it where `reserved_exact`.
    pub fn check_peaks(
        &mut self,
        after: &str,
        checked: &Checked,
        reserved: u64,
        reserved_exact: bool,
    ) -> Result<(), String> {
        let stats = &checked.stats;
        self.peak_allocated = self.peak_allocated.max(checked.allocated);
        self.peak_requested = self.peak_requested.max(checked.requested);
        self.peak_reserved = self.peak_reserved.max(reserved);
        ensure!(
            stats.allocated_bytes.all.peak == self.peak_allocated,
            "after {after}: allocated_bytes.all.peak {} != {}",
            stats.allocated_bytes.all.peak,
            self.peak_allocated
        );
        ensure!(
            stats.requested_bytes.all.peak == self.peak_requested,
            "after {after}: requested_bytes.all.peak {} != {}",
            stats.requested_bytes.all.peak,
            self.peak_requested
        );
        if reserved_exact {
            ensure!(
                stats.reserved_bytes.all.peak == self.peak_reserved,
                "after {after}: reserved_bytes.all.peak {} != {}",
                stats.reserved_bytes.all.peak,
                self.peak_reserved
            );
        } else {
            ensure!(
                stats.reserved_bytes.all.peak >= self.peak_reserved,
                "after {after}: reserved_bytes.all.peak {} < {}",
                stats.reserved_bytes.all.peak,
                self.peak_reserved
            );
        }
        Ok(())
    }

    /// `reset_peak_stats`: every peak becomes its current value, the model's too.
    pub fn reset_peaks(&mut self) -> Result<(), String> {
        self.engine.reset_peak_stats();
        let stats = self.engine.memory_stats();
        self.peak_allocated = stats.allocated_bytes.all.current;
        self.peak_requested = stats.requested_bytes.all.current;
        self.peak_reserved = stats.reserved_bytes.all.current;
        check_peaks_reset(&stats)
    }

    /// A second free of a stale id (freed before, not handed out again) is refused as not
    /// live and changes nothing: no statistic, no page mapped or unmapped. False when no id
    /// is stale yet.
    fn free_stale(&mut self, pick: usize) -> Result<bool, String> {
        if self.stale.is_empty() {
            return Ok(false);
        }
        let id = self.stale[pick % self.stale.len()];
        ensure!(
            !self.live.iter().any(|a| a.block == id),
            "the engine handed the freed id {id:?} out again"
        );
        let before = self.engine.memory_stats();
        let binds = self.device.bind_calls;
        let result = self.engine.free(id, &mut self.device);
        ensure!(
            result == Err(FreeError::NotLive(id)),
            "a second free of {id:?} returned {result:?}"
        );
        ensure!(
            self.engine.allocation(id).is_none(),
            "allocation() of the freed id {id:?} is not None"
        );
        ensure!(
            self.engine.memory_stats() == before,
            "a refused free of {id:?} changed the statistics"
        );
        ensure!(
            self.device.bind_calls == binds,
            "a refused free of {id:?} mapped or unmapped pages"
        );
        bump(&self.tally.stale_refused);
        Ok(true)
    }

    /// `allocate(0)` is refused as zero-sized and changes no statistic.
    fn zero_alloc(&mut self) -> Result<(), String> {
        let before = self.engine.memory_stats();
        let result = self.engine.allocate(0, 0, &mut self.device);
        ensure!(
            matches!(result, Err(AllocError::ZeroSize)),
            "allocate(0) returned {result:?}"
        );
        ensure!(
            self.engine.memory_stats() == before,
            "a zero-byte request changed the statistics"
        );
        Ok(())
    }

    /// `record_reuse` of one live block: the accumulated totals count one more round trip;
    /// current values, peaks and the layout stay as they are. False when nothing is live.
    fn record_reuse(&mut self, pick: usize) -> Result<bool, String> {
        if self.live.is_empty() {
            return Ok(false);
        }
        let a = self.live[pick % self.live.len()];
        let oversize = u64::from(self.is_oversize(a.block_size));
        let mut expected = self.engine.memory_stats();
        let round_trip = |array: &mut StatArray, amount: u64| {
            array.all.allocated += amount;
            array.all.freed += amount;
            let stat = pool_stat(array, a.kind);
            stat.allocated += amount;
            stat.freed += amount;
        };
        round_trip(&mut expected.allocation, 1);
        round_trip(&mut expected.active, 1);
        round_trip(&mut expected.allocated_bytes, a.block_size);
        round_trip(&mut expected.active_bytes, a.block_size);
        round_trip(&mut expected.requested_bytes, a.requested);
        expected.oversize_allocations.allocated += oversize;
        expected.oversize_allocations.freed += oversize;
        self.engine
            .record_reuse(a.kind, 1, a.block_size, a.requested, oversize);
        let got = self.engine.memory_stats();
        ensure!(
            got == expected,
            "record_reuse of {a:?}:\n  expected {expected:?}\n  got      {got:?}"
        );
        Ok(true)
    }
}

/// A harness: an engine in one memory mode, compared with the [`Model`] after every
/// operation. Each mode says how an allocation, a free and `empty_cache` must change its
/// engine and device; the rest of a sequence is the same in both.
pub trait Harness<'a> {
    fn model(&mut self) -> &mut Model<'a>;

    /// Compares the engine with the model and the device after an operation.
    fn check(&mut self, after: &str) -> Result<(), String>;

    /// Allocates and checks the outcome; with `recover`, an out-of-memory is followed by
    /// freeing everything, `empty_cache` and a request that must then be served.
    fn alloc(&mut self, size: u64, stream: u32, recover: bool) -> Result<(), String>;

    /// Frees the live block at `index` and checks the outcome.
    fn free_at(&mut self, index: usize) -> Result<(), String>;

    /// `empty_cache`, and what it must have returned.
    fn empty_cache(&mut self) -> Result<(), String>;

    /// `reset_peak_stats` and the mode's own peaks.
    fn reset_peak(&mut self) -> Result<(), String>;

    /// With every block freed and the cache emptied, the engine and the device hold
    /// nothing.
    fn check_emptied(&mut self) -> Result<(), String>;

    fn free_all(&mut self) -> Result<(), String> {
        while !self.model().live.is_empty() {
            let last = self.model().live.len() - 1;
            self.free_at(last)?;
        }
        Ok(())
    }

    /// Runs `ops`, checking after each, then frees everything and empties the cache.
    fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        let tally = self.model().tally;
        bump(&tally.cases);
        self.check("creation")?;
        for op in ops {
            bump(&tally.ops);
            let live = self.model().live.len();
            match *op {
                Op::Alloc {
                    size,
                    stream,
                    recover,
                } => self.alloc(size, stream, recover)?,
                Op::Free { pick } => {
                    if live > 0 {
                        self.free_at(pick % live)?;
                    }
                }
                Op::FreeBurst { count } => {
                    for i in 0..count.min(live) {
                        let live = self.model().live.len();
                        self.free_at((i * 7919) % live)?;
                    }
                }
                Op::FreeStale { pick } => {
                    if self.model().free_stale(pick)? {
                        self.check("a stale free")?;
                    }
                }
                Op::ZeroAlloc => {
                    self.model().zero_alloc()?;
                    self.check("allocate(0)")?;
                }
                Op::RecordReuse { pick } => {
                    if self.model().record_reuse(pick)? {
                        self.check("record_reuse")?;
                    }
                }
                Op::EmptyCache => self.empty_cache()?,
                Op::ResetPeak => self.reset_peak()?,
            }
        }
        // Freeing everything leaves nothing allocated; empty_cache then leaves nothing
        // reserved.
        self.free_all()?;
        let stats = self.model().engine.memory_stats();
        ensure!(
            stats.allocated_bytes.all.current == 0
                && stats.requested_bytes.all.current == 0
                && stats.allocation.all.current == 0,
            "with every block freed, allocated_bytes is {}",
            stats.allocated_bytes.all.current
        );
        self.empty_cache()?;
        self.check_emptied()
    }
}

/// Runs random sequences of up to `max_length` operations on engines of `setups`, each
/// case on a harness `run_case` makes, until at least `min_ops` operations ran, and returns
/// the totals. Each round is a fresh proptest runner with its own random seed; a failure is
/// shrunk and reported with its minimal sequence.
pub fn run_random<S: Strategy>(
    what: &str,
    setups: S,
    min_ops: u64,
    max_length: usize,
    run_case: impl Fn(&S::Value, &[Op], &Tally) -> Result<(), String>,
) -> Tally {
    let tally = Tally::default();
    let strategy = (setups, prop::collection::vec(op_strategy(), 1..=max_length));
    while tally.ops.get() < min_ops {
        let mut runner = TestRunner::new(ProptestConfig {
            cases: 8,
            failure_persistence: None,
            max_shrink_time: 120_000,
            ..ProptestConfig::default()
        });
        let result = runner.run(&strategy, |(setup, ops)| {
            run_case(&setup, &ops, &tally).map_err(TestCaseError::fail)
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }
    eprintln!("{what}: {tally:?}");
    tally
}
