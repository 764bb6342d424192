//! Pages mode: random sequences under random configurations that map pages, on a simulated
//! device that maps an H200's pages or small pages in short ranges, checked against the
//! shared model and against the device's own record of what is mapped; and a recorded case
//! that once failed.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use wgpool::config::{Config, Policy};
use wgpool::engine::rounding::{MIN_BLOCK_SIZE, SMALL_SIZE, round_request, segment_size_for};
use wgpool::engine::{
    AllocError, Engine, EngineLimits, MemoryMode, PageMapping, SegmentKind, VirtualSegments,
};
use wgpool::format::bytes;

use crate::inputs::{
    Op, PageSetup, assert_every_option, note_options, page_setup_strategy, parse_op,
};
use crate::model::{Harness, Model, Tally, bump, expected_cap, run_random};
use crate::{KIB, MIB};

// ---------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------

/// An engine in pages mode and the model of it.
struct PageHarness<'a> {
    model: Model<'a>,
    /// Most physical memory the engine may hold: the cap and the device limit.
    limit: Option<u64>,
}

/// Whether a free mapped block holds a whole page: an idle page that `empty_cache` and the
/// retry chain must have returned.
fn holds_whole_page(offset: u64, size: u64, page: u64) -> bool {
    offset.div_ceil(page) * page + page <= offset + size
}

impl<'a> PageHarness<'a> {
    fn new(setup: &PageSetup, tally: &'a Tally) -> Result<PageHarness<'a>, String> {
        let config = Config::parse(&setup.conf)
            .map_err(|e| format!("generated conf `{}` does not parse: {e}", setup.conf))?;
        let pages = if setup.small_device {
            PageMapping::new(4 * KIB, 256 * MIB)
        } else {
            VirtualSegments::H200_PAGES
        };
        let mut device = VirtualSegments::unlimited().with_pages(Some(pages));
        device.device_limit = setup.device_limit;
        let limits = EngineLimits::unlimited()
            .with_page_mapping(device.pages)
            .with_device_memory(setup.device_memory);
        let engine = Engine::new(config.clone(), limits)
            .map_err(|e| format!("Engine::new refused `{}`: {e}", setup.conf))?;
        ensure!(
            engine.memory_mode() == MemoryMode::Pages,
            "`{}` on a device that maps pages runs {:?}",
            setup.conf,
            engine.memory_mode()
        );
        // A cap counts physical memory, computed here from the options.
        let cap = expected_cap(&config, setup.device_memory);
        ensure!(
            engine.memory_cap() == cap,
            "memory_cap() is {:?} but the options give {cap:?}",
            engine.memory_cap()
        );
        let limit = match (cap, setup.device_limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(PageHarness {
            model: Model::new(engine, device, config, cap, setup.device_limit, tally),
            limit,
        })
    }

    /// The page size of a segment kind.
    fn page(&self, kind: SegmentKind) -> Result<u64, String> {
        self.model
            .engine
            .page_size(kind)
            .ok_or_else(|| "pages mode has page sizes".to_string())
    }

    /// New memory a request of `rounded` bytes can need at most when no free block serves
    /// it, as the cap checks it and as the device sees it: its pages, and under
    /// `policy:pytorch` at least the segment it would get (PyTorch checks the cap with the
    /// segment size with expandable segments too).
    fn need(&self, rounded: u64) -> Result<(u64, u64), String> {
        let page = self.page(SegmentKind::for_size(rounded))?;
        let pages = rounded.div_ceil(page) * page;
        let for_cap = if self.model.config.policy == Policy::Pytorch {
            pages.max(segment_size_for(&self.model.config, rounded))
        } else {
            pages
        };
        Ok((for_cap, pages))
    }

    /// Every free mapped block with a whole page in it, as (range, offset, size).
    fn idle_pages(&self) -> Result<Vec<(u32, u64, u64)>, String> {
        let mut idle = Vec::new();
        for segment in self.model.engine.snapshot() {
            let page = self.page(segment.kind)?;
            for b in segment.blocks.iter().filter(|b| b.mapped && !b.allocated) {
                if holds_whole_page(b.offset, b.size, page) {
                    idle.push((segment.id.0, b.offset, b.size));
                }
            }
        }
        Ok(idle)
    }

    /// After an out-of-memory: free everything, empty the cache, and ask again. A request
    /// whose pages (and, under `policy:pytorch`, segment) fit the cap and the device must
    /// now be served.
    fn recover(&mut self, size: u64, stream: u32) -> Result<(), String> {
        for a in std::mem::take(&mut self.model.live) {
            self.model
                .engine
                .free(a.block, &mut self.model.device)
                .map_err(|e| e.to_string())?;
        }
        self.empty_cache()?;
        ensure!(
            self.model.device.physical_bytes() == 0,
            "empty_cache with nothing live left {} bytes",
            self.model.device.physical_bytes()
        );
        let (for_cap, pages) = self.need(round_request(&self.model.config, size))?;
        let fits = self.model.cap.is_none_or(|c| for_cap <= c)
            && self.model.device_limit.is_none_or(|l| pages <= l);
        match self
            .model
            .engine
            .allocate(size, stream, &mut self.model.device)
        {
            Ok(a) => {
                bump(&self.model.tally.recoveries);
                self.model.live.push(a);
            }
            Err(AllocError::OutOfMemory(e)) => {
                ensure!(!fits, "{size} B failed on an empty pool: {e}");
                self.model.ooms += 1;
            }
            Err(e) => return Err(format!("{size} B on an empty pool: {e}")),
        }
        self.check(&format!("recovering from an out-of-memory for {size} B"))
    }
}

impl<'a> Harness<'a> for PageHarness<'a> {
    fn model(&mut self) -> &mut Model<'a> {
        &mut self.model
    }

    /// The model's checks, and the engine against the device's own record of what is
    /// mapped: no live byte on an unmapped page, and every page statistic.
    fn check(&mut self, after: &str) -> Result<(), String> {
        let checked = self.model.check_live(after, "range")?;
        let (snapshot, stats) = (&checked.snapshot, &checked.stats);
        let device = &self.model.device;
        for segment in snapshot {
            for b in &segment.blocks {
                let mapped = device.mapped_within(segment.id, b.offset, b.offset + b.size);
                // What the engine thinks is mapped, the device has mapped, and nothing else.
                let expected = if b.mapped { b.size } else { 0 };
                ensure!(
                    mapped == expected,
                    "after {after}: range {:?} block {}+{} ({}) has {mapped} bytes mapped on the device",
                    segment.id,
                    b.offset,
                    b.size,
                    if b.mapped { "mapped" } else { "unmapped" }
                );
            }
        }
        // No live byte on an unmapped page, as the device sees it.
        for a in &self.model.live {
            ensure!(
                device.is_mapped(a.segment, a.offset, a.offset + a.block_size),
                "after {after}: live {a:?} is not wholly mapped on the device"
            );
        }
        // A range is not a segment, and nothing is an inactive split (PyTorch's expandable
        // segments count them so).
        ensure!(
            stats.segment.all.current == 0
                && stats.inactive_split.all.current == 0
                && stats.inactive_split_bytes.all.current == 0,
            "after {after}: pages mode counts {} segments, {} inactive splits of {} B",
            stats.segment.all.current,
            stats.inactive_split.all.current,
            stats.inactive_split_bytes.all.current
        );
        // Maps count as device allocations and unmaps as device frees: one per bind.
        ensure!(
            stats.num_device_alloc + stats.num_device_free == device.bind_calls,
            "after {after}: num_device_alloc {} + num_device_free {} but the device saw {} binds",
            stats.num_device_alloc,
            stats.num_device_free,
            device.bind_calls
        );

        // The page figures against the device's.
        let pages = self.model.engine.page_stats().ok_or("no page statistics")?;
        ensure!(
            stats.reserved_bytes.all.current == device.mapped_bytes
                && pages.mapped_bytes == device.mapped_bytes
                && device.spare_bytes == 0
                && pages.mapped_total == device.mapped_total
                && pages.unmapped_total == device.unmapped_total
                && pages.bind_calls == device.bind_calls
                && pages.ranges == device.live_ranges() as u64
                && pages.range_bytes == snapshot.iter().map(|s| s.size).sum::<u64>(),
            "after {after}: the engine's page figures {pages:?} (reserved {}) disagree with the \
             device's: mapped {}, spare {}, mapped total {}, unmapped total {}, binds {}, ranges {}",
            stats.reserved_bytes.all.current,
            device.mapped_bytes,
            device.spare_bytes,
            device.mapped_total,
            device.unmapped_total,
            device.bind_calls,
            device.live_ranges()
        );
        // A cap counts physical memory: mapped pages and spare pages, at every
        // moment, as the device saw it. PyTorch's expandable segments check it once per
        // request, with the segment size the request would get, and map whole pages after
        // that: a request of 10 MiB or more may take physical memory up to a large page
        // (less one byte) above the cap.
        if let Some(cap) = self.model.cap {
            let overshoot = if self.model.config.policy == Policy::Pytorch {
                self.page(SegmentKind::Large)? - 1
            } else {
                0
            };
            ensure!(
                device.physical_peak <= cap + overshoot,
                "after {after}: physical memory reached {} over the cap {cap}",
                device.physical_peak
            );
        }
        ensure!(
            pages.physical_peak >= device.physical_bytes()
                && pages.physical_peak <= device.physical_peak,
            "after {after}: physical peak {} outside the current {} and the device's peak {}",
            pages.physical_peak,
            device.physical_bytes(),
            device.physical_peak
        );

        // Mapped memory can also move within an operation.
        let mapped = device.mapped_bytes;
        self.model.check_peaks(after, &checked, mapped, false)
    }

    fn alloc(&mut self, size: u64, stream: u32, recover: bool) -> Result<(), String> {
        bump(&self.model.tally.allocs);
        let what = format!("allocate({size}, stream {stream})");
        let rounded = round_request(&self.model.config, size);
        let kind = SegmentKind::for_size(rounded);
        let before = self.model.engine.memory_stats();
        let (binds_before, unmapped_before) = (
            self.model.device.bind_calls,
            self.model.device.unmapped_total,
        );
        match self
            .model
            .engine
            .allocate(size, stream, &mut self.model.device)
        {
            Ok(a) => {
                ensure!(
                    a.requested == size
                        && a.block_size >= rounded
                        && a.offset % MIN_BLOCK_SIZE == 0
                        && a.kind == kind,
                    "{what} (rounded {rounded}) returned {a:?}"
                );
                // PyTorch's split rule, as in segments mode.
                match kind {
                    SegmentKind::Small => ensure!(
                        a.block_size == rounded,
                        "{what}: a small-kind block must be split to the rounded size {rounded}: {a:?}"
                    ),
                    SegmentKind::Large => ensure!(
                        self.model.is_oversize(rounded) || a.block_size - rounded <= SMALL_SIZE,
                        "{what}: a block of {} for a rounded {rounded} should have been split",
                        a.block_size
                    ),
                }
                if self.model.device.unmapped_total > unmapped_before {
                    // Idle pages were recycled (or released by the chain) to serve it.
                    bump(&self.model.tally.releases_during_alloc);
                }
                if self.model.device.bind_calls == binds_before {
                    bump(&self.model.tally.cache_hits);
                } else {
                    bump(&self.model.tally.new_segments);
                }
                self.model.live.push(a);
                self.check(&what)?;
            }
            Err(AllocError::OutOfMemory(oom)) => {
                self.model.ooms += 1;
                bump(&self.model.tally.ooms);
                ensure!(
                    self.limit.is_some(),
                    "{what}: out of memory with no cap or device limit: {oom}"
                );
                self.check(&what)?;
                let stats = self.model.engine.memory_stats();
                ensure!(
                    stats.num_alloc_retries == before.num_alloc_retries + 1,
                    "{what}: an out-of-memory must come after the release-everything retry"
                );
                // The retry chain returned every idle page before failing.
                let idle = self.idle_pages()?;
                ensure!(
                    idle.is_empty() && self.model.device.spare_bytes == 0,
                    "{what} failed with idle pages left mapped {idle:?} or {} B spare",
                    self.model.device.spare_bytes
                );
                let allocated: u64 = self.model.live.iter().map(|a| a.block_size).sum();
                let physical = self.model.device.physical_bytes();
                ensure!(
                    oom.requested == size
                        && oom.rounded == rounded
                        && oom.kind == kind
                        && oom.cap == self.model.cap
                        && oom.allocated == allocated
                        && oom.reserved == physical,
                    "{what}: the error's figures are wrong: {oom:?} (allocated {allocated}, \
                     physical {physical}, cap {:?})",
                    self.model.cap
                );
                // ... and the request really does not fit.
                let (for_cap, pages) = self.need(rounded)?;
                let over_cap = self.model.cap.is_some_and(|c| physical + for_cap > c);
                let over_device = self
                    .model
                    .device_limit
                    .is_some_and(|l| physical + pages > l);
                ensure!(
                    over_cap || over_device,
                    "{what} failed though {pages} B of pages ({for_cap} B for the cap) fit: \
                     physical {physical}, cap {:?}, device limit {:?}",
                    self.model.cap,
                    self.model.device_limit
                );
                let message = oom.to_string();
                let mut must_name = vec![bytes(size), bytes(allocated)];
                if let Some(cap) = self.model.cap {
                    must_name.push(bytes(cap));
                }
                for part in must_name {
                    ensure!(
                        message.contains(&part),
                        "{what}: `{message}` does not mention {part}"
                    );
                }
                if recover {
                    self.recover(size, stream)?;
                }
            }
            Err(AllocError::TooLarge { requested, max, .. }) => {
                bump(&self.model.tally.too_large);
                ensure!(
                    (size > max || rounded > max) && (requested == size || requested == rounded),
                    "{what}: TooLarge {{ requested: {requested}, max: {max} }} with rounded {rounded}"
                );
                ensure!(
                    self.model.engine.memory_stats() == before
                        && self.model.device.bind_calls == binds_before,
                    "{what}: a refused request changed the engine"
                );
                self.check(&what)?;
            }
            Err(e) => return Err(format!("{what} failed unexpectedly: {e}")),
        }
        Ok(())
    }

    fn free_at(&mut self, index: usize) -> Result<(), String> {
        let (binds_before, mapped_before) =
            (self.model.device.bind_calls, self.model.device.mapped_bytes);
        let a = self.model.free(index)?;
        let what = format!("free({a:?})");
        // Pages stay mapped after a free, under both policies.
        ensure!(
            self.model.device.bind_calls == binds_before
                && self.model.device.mapped_bytes == mapped_before,
            "{what} mapped or unmapped pages"
        );
        self.check(&what)?;
        // The freed range is now part of one free mapped block.
        let snapshot = self.model.engine.snapshot();
        let segment = snapshot
            .iter()
            .find(|s| s.id == a.segment)
            .ok_or_else(|| format!("{what}: its range is gone"))?;
        let holder = segment
            .blocks
            .iter()
            .find(|b| b.offset <= a.offset && a.offset < b.offset + b.size)
            .ok_or_else(|| format!("{what}: offset {} is in no block", a.offset))?;
        ensure!(
            !holder.allocated
                && holder.mapped
                && holder.offset + holder.size >= a.offset + a.block_size,
            "{what}: the freed range is not covered by one free mapped block: {holder:?}"
        );
        Ok(())
    }

    fn empty_cache(&mut self) -> Result<(), String> {
        self.model.engine.empty_cache(&mut self.model.device);
        self.check("empty_cache")?;
        // Every idle page is returned: no free block keeps a whole page mapped, no memory
        // is spare, and no range is left without a mapped page.
        let idle = self.idle_pages()?;
        ensure!(
            idle.is_empty(),
            "empty_cache kept the idle pages of free blocks {idle:?} mapped"
        );
        ensure!(
            self.model.device.spare_bytes == 0,
            "empty_cache kept {} spare bytes",
            self.model.device.spare_bytes
        );
        for segment in self.model.engine.snapshot() {
            ensure!(
                segment.blocks.iter().any(|b| b.mapped),
                "empty_cache kept range {:?} with no page mapped",
                segment.id
            );
        }
        if self.model.live.is_empty() {
            ensure!(
                self.model.device.physical_bytes() == 0 && self.model.device.live_ranges() == 0,
                "empty_cache with nothing live left {} bytes and {} ranges",
                self.model.device.physical_bytes(),
                self.model.device.live_ranges()
            );
        }
        Ok(())
    }

    /// `reset_peak_stats`: every peak becomes its current value, the physical peak too.
    fn reset_peak(&mut self) -> Result<(), String> {
        self.model.reset_peaks()?;
        let pages = self.model.engine.page_stats().ok_or("no page statistics")?;
        ensure!(
            pages.physical_peak == self.model.device.physical_bytes(),
            "after reset_peak_stats: physical peak {} but {} physical",
            pages.physical_peak,
            self.model.device.physical_bytes()
        );
        self.check("reset_peak_stats")
    }

    fn check_emptied(&mut self) -> Result<(), String> {
        let stats = self.model.engine.memory_stats();
        ensure!(
            stats.reserved_bytes.all.current == 0 && self.model.device.physical_bytes() == 0,
            "after freeing everything and empty_cache: {} B reserved, {} B physical",
            stats.reserved_bytes.all.current,
            self.model.device.physical_bytes()
        );
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Random sequences
// ---------------------------------------------------------------------------------------

/// Random sequences in pages mode, at least `min_ops` operations in cases of up to
/// `max_length`.
fn run_pages(limited: bool, min_ops: u64, max_length: usize) -> Tally {
    run_random(
        &format!("pages (limited: {limited})"),
        page_setup_strategy(limited),
        min_ops,
        max_length,
        |setup, ops, tally| PageHarness::new(setup, tally)?.run(ops),
    )
}

#[test]
fn random_sequences_in_pages_mode_keep_invariants() {
    let c = run_pages(false, 30_000, 1500);
    assert!(
        c.cache_hits.get() > 1000 && c.new_segments.get() > 1000,
        "{c:?}"
    );
    assert!(c.stale_refused.get() > 50, "{c:?}");
}

#[test]
fn random_sequences_in_pages_mode_under_caps_survive_out_of_memory() {
    let c = run_pages(true, 30_000, 1500);
    assert!(c.ooms.get() > 50 && c.recoveries.get() > 10, "{c:?}");
    assert!(c.releases_during_alloc.get() > 100, "{c:?}");
}

/// The random page-mode configurations mix every option in the table.
#[test]
fn random_page_configurations_use_every_option() {
    let mut runner = TestRunner::default();
    let mut seen = BTreeSet::new();
    for limited in [false, true] {
        let strategy = page_setup_strategy(limited);
        for _ in 0..500 {
            note_options(
                &strategy.new_tree(&mut runner).unwrap().current().conf,
                &mut seen,
            );
        }
    }
    assert_every_option(&seen, "random page-mode configuration");
}

// ---------------------------------------------------------------------------------------
// A recorded case
// ---------------------------------------------------------------------------------------

/// Reads a recorded page-mode case: a `setup` line (tab-separated conf, small_device,
/// device_memory, device_limit; `-` for none), then one operation per line.
fn read_page_case(text: &str) -> (PageSetup, Vec<Op>) {
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let opt = |s: &str| {
        if s == "-" {
            None
        } else {
            Some(s.parse::<u64>().unwrap())
        }
    };
    let setup = PageSetup {
        conf: head[1].to_string(),
        small_device: head[2] == "true",
        device_memory: opt(head[3]),
        device_limit: opt(head[4]),
    };
    let ops = lines
        .filter(|l| !l.trim().is_empty())
        .map(parse_op)
        .collect();
    (setup, ops)
}

/// A case the random pages-under-caps test found (proptest, shrunk, then cut down by
/// removing operations while it still failed): after recycling idle pages under a cap, the
/// pages policy mapped a place it had found before the recycling, which had been joined into
/// another block meanwhile (the engine's debug assertion that the block is unmapped fired).
/// Fixed in d6b59e1; the case fails on 60eaa42.
#[test]
fn pages_policy_never_maps_a_place_that_recycling_made_stale() {
    let text = include_str!("../data/pages_stale_place.case");
    let (setup, ops) = read_page_case(text);
    assert!(ops.len() > 100, "the recorded case is read whole");
    let tally = Tally::default();
    PageHarness::new(&setup, &tally)
        .and_then(|mut harness| harness.run(&ops))
        .unwrap();
    assert!(tally.releases_during_alloc.get() > 0, "{tally:?}");
}
