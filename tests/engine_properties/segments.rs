//! Segments mode: random sequences under random configurations of fixed segments, checked
//! against the shared model and, under `policy:pytorch`, against PyTorch's best fit computed
//! from the previous snapshot; the segment counts and reserved bytes against the simulated
//! device's.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use wgpool::config::{Caching, Config, Policy};
use wgpool::engine::rounding::{MIN_BLOCK_SIZE, SMALL_SIZE, round_request, segment_size_for};
use wgpool::engine::{
    AllocError, Engine, EngineLimits, SegmentKind, SegmentSnapshot, VirtualSegments,
};
use wgpool::format::bytes;

use crate::GIB;
use crate::inputs::{
    PolicyChoice, SegmentSetup, Shape, assert_every_option, note_options, setup_strategy,
};
use crate::model::{Harness, Model, Tally, bump, check_stat, expected_cap, run_random};

// ---------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------

/// An engine in segments mode and the model of it.
struct SegmentHarness<'a> {
    model: Model<'a>,
    max_segment_size: u64,
    /// Creation order of each live segment id: PyTorch breaks best-fit ties by address,
    /// and the engine's addresses grow with segment creation.
    created_order: HashMap<u32, u64>,
    next_order: u64,
    /// The layout after the last operation.
    snapshot: Vec<SegmentSnapshot>,
}

impl<'a> SegmentHarness<'a> {
    fn new(setup: &SegmentSetup, tally: &'a Tally) -> Result<SegmentHarness<'a>, String> {
        let config = Config::parse(&setup.conf)
            .map_err(|e| format!("generated conf `{}` does not parse: {e}", setup.conf))?;
        let mut device_memory = setup.device_memory;
        if config.per_process_memory_fraction.is_some()
            && device_memory.is_none()
            && config.memory_limit.is_none()
        {
            // The cap cannot be computed: the engine must say so and name the way out.
            let limits = EngineLimits::unlimited()
                .with_device_memory(None)
                .with_max_segment_size(setup.max_segment_size);
            match Engine::new(config.clone(), limits).map_err(|e| e.to_string()) {
                Err(message) => ensure!(
                    message.contains("memory_limit_mb")
                        && message.contains("per_process_memory_fraction"),
                    "the error for a fraction without a device size should name \
                     memory_limit_mb and per_process_memory_fraction: {message}"
                ),
                Ok(_) => {
                    return Err(format!(
                        "`{}` with no device memory size was accepted",
                        setup.conf
                    ));
                }
            }
            device_memory = Some(8 * GIB);
        }
        let limits = EngineLimits::unlimited()
            .with_device_memory(device_memory)
            .with_max_segment_size(setup.max_segment_size);
        let engine = Engine::new(config.clone(), limits)
            .map_err(|e| format!("Engine::new refused `{}`: {e}", setup.conf))?;
        let cap = expected_cap(&config, device_memory);
        ensure!(
            engine.memory_cap() == cap,
            "memory_cap() is {:?} but the options give {cap:?}",
            engine.memory_cap()
        );
        ensure!(
            engine.config() == &config,
            "engine.config() differs from the parsed config"
        );
        let device = match setup.device_limit {
            Some(limit) => VirtualSegments::with_device_limit(limit),
            None => VirtualSegments::unlimited(),
        };
        Ok(SegmentHarness {
            model: Model::new(engine, device, config, cap, setup.device_limit, tally),
            max_segment_size: setup.max_segment_size,
            created_order: HashMap::new(),
            next_order: 0,
            snapshot: Vec::new(),
        })
    }

    fn passthrough(&self) -> bool {
        self.model.config.backend == Caching::Passthrough
    }

    /// Whether every placement must follow PyTorch's rules exactly.
    fn exact_pytorch(&self) -> bool {
        self.model.config.policy == Policy::Pytorch && self.model.config.backend == Caching::Native
    }

    /// PyTorch's segment size for a rounded request (or the request itself, pass-through).
    fn pytorch_segment_size(&self, rounded: u64) -> u64 {
        if self.passthrough() {
            rounded
        } else {
            segment_size_for(&self.model.config, rounded).min(self.max_segment_size)
        }
    }

    /// The size a request gets from a free block of `block` bytes: PyTorch's `should_split`.
    fn served_size(&self, block: u64, rounded: u64) -> u64 {
        let remaining = block - rounded;
        let split = match SegmentKind::for_size(rounded) {
            SegmentKind::Small => remaining >= MIN_BLOCK_SIZE,
            SegmentKind::Large => !self.model.is_oversize(rounded) && remaining > SMALL_SIZE,
        };
        if split && !self.passthrough() {
            rounded
        } else {
            block
        }
    }

    /// PyTorch's `get_free_block` over the previous snapshot: the free block of the same
    /// kind and stream with the smallest (size, address) that fits, unless an oversize rule
    /// refuses it. Returns (segment, offset, block size).
    fn pytorch_choice(&self, rounded: u64, stream: u32) -> Result<Option<(u32, u64, u64)>, String> {
        let kind = SegmentKind::for_size(rounded);
        let mut best: Option<(u64, u64, u64, u32)> = None;
        for segment in &self.snapshot {
            if segment.kind != kind || segment.stream != stream {
                continue;
            }
            let order = *self
                .created_order
                .get(&segment.id.0)
                .ok_or_else(|| format!("segment {:?} was never seen created", segment.id))?;
            for b in &segment.blocks {
                if !b.allocated && b.size >= rounded {
                    let key = (b.size, order, b.offset, segment.id.0);
                    if best.is_none_or(|k| key < k) {
                        best = Some(key);
                    }
                }
            }
        }
        let Some((size, _, offset, segment)) = best else {
            return Ok(None);
        };
        if let Some(max_split) = self.model.config.max_split_size {
            if rounded < max_split && size >= max_split {
                return Ok(None);
            }
            if rounded >= max_split && size >= rounded + self.model.config.max_non_split_rounding {
                return Ok(None);
            }
        }
        Ok(Some((segment, offset, size)))
    }

    /// Whether a segment of `segment_size` fits under the cap and the device limit when
    /// nothing is reserved.
    fn fits_when_empty(&self, segment_size: u64) -> bool {
        self.model.cap.is_none_or(|c| segment_size <= c)
            && self.model.device_limit.is_none_or(|l| segment_size <= l)
    }

    /// A segment of the last snapshot.
    fn segment(&self, id: u32) -> Option<&SegmentSnapshot> {
        self.snapshot.iter().find(|s| s.id.0 == id)
    }

    /// Allocates and checks the outcome; returns the engine's error, if any.
    fn try_alloc(&mut self, size: u64, stream: u32) -> Result<Option<AllocError>, String> {
        bump(&self.model.tally.allocs);
        let what = format!("allocate({size}, stream {stream})");
        let rounded = round_request(&self.model.config, size);
        let before = self.model.engine.memory_stats();
        let (created_before, released_before) =
            (self.model.device.created, self.model.device.released);
        let expected = if self.exact_pytorch() {
            Some(self.pytorch_choice(rounded, stream)?)
        } else {
            None
        };
        let result = self
            .model
            .engine
            .allocate(size, stream, &mut self.model.device);
        let created = self.model.device.created - created_before;
        let released = self.model.device.released - released_before;
        match result {
            Ok(a) => {
                ensure!(created <= 1, "{what} created {created} segments");
                if created == 1 {
                    self.created_order.insert(a.segment.0, self.next_order);
                    self.next_order += 1;
                    bump(&self.model.tally.new_segments);
                } else {
                    bump(&self.model.tally.cache_hits);
                }
                if released > 0 {
                    bump(&self.model.tally.releases_during_alloc);
                }
                self.model.live.push(a);
                self.check(&what)?;
                ensure!(
                    rounded <= self.max_segment_size,
                    "{what} was served though its rounded size {rounded} is over the segment limit"
                );
                ensure!(
                    a.requested == size && a.block_size >= rounded,
                    "{what} (rounded {rounded}) returned {a:?}"
                );
                // Under a cap the default policy lets a small request take room in a large
                // segment when no small segment fits (issue 13 item 6).
                let small_in_large = self.model.config.policy == Policy::Compact
                    && self.model.cap.is_some()
                    && SegmentKind::for_size(rounded) == SegmentKind::Small
                    && a.kind == SegmentKind::Large;
                ensure!(
                    a.kind == SegmentKind::for_size(rounded) || small_in_large,
                    "{what}: {a:?} is under the wrong segment kind"
                );
                let segment = self.segment(a.segment.0).expect("checked above");
                ensure!(
                    segment.stream == stream,
                    "{what}: {a:?} lies in a segment of stream {}",
                    segment.stream
                );
                let segment_size = segment.size;
                match a.kind {
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
                if self.passthrough() {
                    ensure!(
                        created == 1
                            && a.offset == 0
                            && segment_size == rounded
                            && a.block_size == rounded,
                        "{what}: pass-through must create one segment of exactly {rounded}: {a:?} in a segment of {segment_size}"
                    );
                }
                if let Some(expected) = expected {
                    match expected {
                        Some((seg, offset, block)) => ensure!(
                            created == 0
                                && a.segment.0 == seg
                                && a.offset == offset
                                && a.block_size == self.served_size(block, rounded),
                            "{what}: PyTorch's best fit is the free block of {block} at \
                             segment {seg} offset {offset}, but the engine returned {a:?} \
                             (created {created} segments)"
                        ),
                        None => {
                            let want = self.pytorch_segment_size(rounded);
                            ensure!(
                                created == 1
                                    && a.offset == 0
                                    && segment_size == want
                                    && a.block_size == self.served_size(want, rounded),
                                "{what}: no cached block fits, so PyTorch creates a segment of \
                                 {want} and serves offset 0, but the engine returned {a:?} in a \
                                 segment of {segment_size} (created {created})"
                            );
                            let after = self.model.engine.memory_stats();
                            ensure!(
                                released == 0
                                    || self.model.engine.memory_cap().is_some()
                                    || self.model.config.max_split_size.is_some()
                                    || after.num_alloc_retries > before.num_alloc_retries,
                                "{what}: released {released} segments with no cap, no \
                                 max_split_size and no retry"
                            );
                        }
                    }
                }
                Ok(None)
            }
            Err(AllocError::OutOfMemory(oom)) => {
                self.model.ooms += 1;
                bump(&self.model.tally.ooms);
                self.check(&what)?;
                let stats = self.model.engine.memory_stats();
                ensure!(created == 0, "{what} failed but created {created} segments");
                ensure!(
                    stats.num_alloc_retries == before.num_alloc_retries + 1,
                    "{what}: an out-of-memory must come after the release-everything retry"
                );
                if let Some(Some(found)) = expected {
                    return Err(format!(
                        "{what}: out of memory though the cached block {found:?} serves it"
                    ));
                }
                let allocated: u64 = self.model.live.iter().map(|a| a.block_size).sum();
                let reserved = stats.reserved_bytes.all.current;
                ensure!(
                    oom.requested == size
                        && oom.rounded == rounded
                        && oom.kind == SegmentKind::for_size(rounded)
                        && oom.cap == self.model.cap
                        && oom.allocated == allocated
                        && oom.reserved == reserved,
                    "{what}: the error's figures are wrong: {oom:?} (allocated {allocated}, \
                     reserved {reserved}, cap {:?})",
                    self.model.cap
                );
                if self.exact_pytorch() || self.passthrough() {
                    ensure!(
                        oom.segment_size == self.pytorch_segment_size(rounded),
                        "{what}: the error names a segment of {} but PyTorch needs {}",
                        oom.segment_size,
                        self.pytorch_segment_size(rounded)
                    );
                }
                // The whole chain ran: no cached whole segment is left ...
                for s in &self.snapshot {
                    ensure!(
                        s.blocks.iter().any(|b| b.allocated),
                        "{what} failed while segment {:?} was wholly free and releasable",
                        s.id
                    );
                }
                // ... and the segment really does not fit.
                let over_cap = self
                    .model
                    .cap
                    .is_some_and(|c| reserved + oom.segment_size > c);
                let over_device = self
                    .model
                    .device_limit
                    .is_some_and(|l| self.model.device.live_bytes + oom.segment_size > l);
                ensure!(
                    over_cap || over_device,
                    "{what} failed though a segment of {} fits (reserved {reserved}, cap {:?}, \
                     device {} of {:?})",
                    oom.segment_size,
                    self.model.cap,
                    self.model.device.live_bytes,
                    self.model.device_limit
                );
                let message = oom.to_string();
                let mut must_name = vec![
                    bytes(size),
                    bytes(allocated),
                    bytes(reserved.saturating_sub(allocated)),
                ];
                if let Some(cap) = self.model.cap {
                    must_name.push(bytes(cap));
                }
                for part in must_name {
                    ensure!(
                        message.contains(&part),
                        "{what}: `{message}` does not mention {part}"
                    );
                }
                Ok(Some(AllocError::OutOfMemory(oom)))
            }
            Err(AllocError::TooLarge {
                requested,
                max,
                limit,
            }) => {
                bump(&self.model.tally.too_large);
                ensure!(
                    max == self.max_segment_size
                        && (size > max || rounded > max)
                        && (requested == size || requested == rounded),
                    "{what}: TooLarge {{ requested: {requested}, max: {max} }} with rounded \
                     {rounded} and limit {}",
                    self.max_segment_size
                );
                ensure!(
                    self.model.engine.memory_stats() == before && created == 0 && released == 0,
                    "{what}: a refused request changed the engine"
                );
                self.check(&what)?;
                Ok(Some(AllocError::TooLarge {
                    requested,
                    max,
                    limit,
                }))
            }
            Err(e) => Err(format!("{what} failed unexpectedly: {e}")),
        }
    }

    /// After an out-of-memory: free everything, empty the cache, and ask again. A request
    /// whose segment fits under the cap and the device limit must now succeed.
    fn recover(&mut self, size: u64, stream: u32) -> Result<(), String> {
        self.free_all()?;
        self.empty_cache()?;
        let stats = self.model.engine.memory_stats();
        ensure!(
            stats.reserved_bytes.all.current == 0 && stats.segment.all.current == 0,
            "with nothing live, empty_cache left {} bytes reserved",
            stats.reserved_bytes.all.current
        );
        let rounded = round_request(&self.model.config, size);
        let retry = if self.fits_when_empty(self.pytorch_segment_size(rounded)) {
            size
        } else if self.fits_when_empty(self.pytorch_segment_size(MIN_BLOCK_SIZE)) {
            1
        } else {
            return Ok(());
        };
        if let Some(e) = self.try_alloc(retry, stream)? {
            return Err(format!(
                "after freeing everything and empty_cache, allocate({retry}) still failed \
                 (cap {:?}, device limit {:?}): {e}",
                self.model.cap, self.model.device_limit
            ));
        }
        bump(&self.model.tally.recoveries);
        Ok(())
    }
}

impl<'a> Harness<'a> for SegmentHarness<'a> {
    fn model(&mut self) -> &mut Model<'a> {
        &mut self.model
    }

    /// The model's checks; the segments against the device's; keeps the new snapshot.
    fn check(&mut self, after: &str) -> Result<(), String> {
        let checked = self.model.check_live(after, "segment")?;
        let (snapshot, stats) = (&checked.snapshot, &checked.stats);
        let device = &self.model.device;
        let reserved: u64 = snapshot.iter().map(|s| s.size).sum();
        ensure!(
            stats.reserved_bytes.all.current == reserved
                && reserved == device.live_bytes
                && stats.segment.all.current == snapshot.len() as u64
                && device.created - device.released == snapshot.len() as u64,
            "after {after}: reserved {} / segments {} disagree with the layout ({reserved}, {}) \
             or the device ({} bytes, {} created, {} released)",
            stats.reserved_bytes.all.current,
            stats.segment.all.current,
            snapshot.len(),
            device.live_bytes,
            device.created,
            device.released
        );
        ensure!(
            stats.num_device_alloc == device.created && stats.num_device_free == device.released,
            "after {after}: num_device_alloc/free {}/{} but the device saw {}/{}",
            stats.num_device_alloc,
            stats.num_device_free,
            device.created,
            device.released
        );
        if let Some(cap) = self.model.cap {
            ensure!(
                reserved <= cap,
                "after {after}: reserved {reserved} is over the cap {cap}"
            );
        }
        check_stat("oversize_segments", &stats.oversize_segments)?;
        // PyTorch's chain only releases before it creates, so its reserved peak is the
        // largest seen after an operation; other policies may only be higher.
        let exact = self.exact_pytorch() || self.passthrough();
        self.model.check_peaks(after, &checked, reserved, exact)?;
        self.snapshot = checked.snapshot;
        Ok(())
    }

    fn alloc(&mut self, size: u64, stream: u32, recover: bool) -> Result<(), String> {
        if let Some(AllocError::OutOfMemory(_)) = self.try_alloc(size, stream)? {
            if recover {
                self.recover(size, stream)?;
            }
        }
        Ok(())
    }

    fn free_at(&mut self, index: usize) -> Result<(), String> {
        let before = self.model.engine.memory_stats();
        let (created_before, released_before) =
            (self.model.device.created, self.model.device.released);
        let a = self.model.free(index)?;
        let what = format!("free({a:?})");
        self.check(&what)?;
        let after = self.model.engine.memory_stats();
        ensure!(
            self.model.device.created == created_before,
            "{what} created a segment"
        );
        let released = self.model.device.released - released_before;
        if self.passthrough() {
            ensure!(
                released == 1
                    && before.reserved_bytes.all.current - after.reserved_bytes.all.current
                        == a.block_size
                    && self.segment(a.segment.0).is_none(),
                "{what}: pass-through must release the block's own segment"
            );
        } else if self.exact_pytorch() {
            ensure!(
                released == 0 && after.reserved_bytes == before.reserved_bytes,
                "{what}: PyTorch never releases a segment at free"
            );
        }
        // The freed range is now part of one free block.
        if let Some(segment) = self.segment(a.segment.0) {
            let holder = segment
                .blocks
                .iter()
                .find(|b| b.offset <= a.offset && a.offset < b.offset + b.size)
                .ok_or_else(|| format!("{what}: offset {} is in no block", a.offset))?;
            ensure!(
                !holder.allocated && holder.offset + holder.size >= a.offset + a.block_size,
                "{what}: the freed range is not covered by one free block: {holder:?}"
            );
        }
        Ok(())
    }

    fn empty_cache(&mut self) -> Result<(), String> {
        self.model.engine.empty_cache(&mut self.model.device);
        self.check("empty_cache")?;
        for s in &self.snapshot {
            ensure!(
                s.blocks.iter().any(|b| b.allocated),
                "empty_cache left the wholly free segment {:?}",
                s.id
            );
        }
        Ok(())
    }

    fn reset_peak(&mut self) -> Result<(), String> {
        self.model.reset_peaks()?;
        self.check("reset_peak_stats")
    }

    fn check_emptied(&mut self) -> Result<(), String> {
        let stats = self.model.engine.memory_stats();
        ensure!(
            stats.reserved_bytes.all.current == 0
                && stats.segment.all.current == 0
                && self.model.device.live_bytes == 0
                && stats.inactive_split_bytes.all.current == 0,
            "after freeing everything and empty_cache: reserved {} in {} segments",
            stats.reserved_bytes.all.current,
            stats.segment.all.current
        );
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Random sequences
// ---------------------------------------------------------------------------------------

/// Runs random sequences of up to `max_length` operations of one shape until at least
/// `min_ops` operations ran, and returns the totals.
fn run_random_segments(shape: Shape, min_ops: u64, max_length: usize) -> Tally {
    run_random(
        &format!("{shape:?}"),
        setup_strategy(shape),
        min_ops,
        max_length,
        |setup, ops, tally| SegmentHarness::new(setup, tally)?.run(ops),
    )
}

// The four random tests run in parallel under `cargo test`; together they run at least
// 4 * OPS_PER_TEST = 220,000 checked operations.
const OPS_PER_TEST: u64 = 55_000;

/// Runs at least [`OPS_PER_TEST`] checked random operations of one shape, in cases of up to
/// 2400 operations, and returns what they exercised.
fn run_checked(policy: PolicyChoice, limited: bool) -> Tally {
    let c = run_random_segments(Shape { policy, limited }, OPS_PER_TEST, 2400);
    assert!(c.ops.get() >= OPS_PER_TEST, "{c:?}");
    c
}

#[test]
fn random_sequences_under_pytorch_policy_follow_best_fit() {
    let c = run_checked(PolicyChoice::Pytorch, false);
    assert!(
        c.cache_hits.get() > 1000 && c.new_segments.get() > 1000,
        "{c:?}"
    );
}

#[test]
fn random_sequences_under_default_policy_keep_invariants() {
    let c = run_checked(PolicyChoice::Default, false);
    assert!(
        c.cache_hits.get() > 1000 && c.new_segments.get() > 1000,
        "{c:?}"
    );
}

#[test]
fn random_sequences_under_caps_survive_out_of_memory() {
    let c = run_checked(PolicyChoice::Any, true);
    assert!(c.ooms.get() > 50 && c.recoveries.get() > 10, "{c:?}");
    assert!(c.releases_during_alloc.get() > 10, "{c:?}");
}

#[test]
fn random_sequences_mixing_every_option_keep_invariants() {
    let c = run_checked(PolicyChoice::Any, false);
    assert!(c.stale_refused.get() > 100, "{c:?}");
}

/// The random configurations mix every option in the table: a new option that the
/// generator does not know fails here.
#[test]
fn random_configurations_use_every_option() {
    let mut runner = TestRunner::default();
    let mut seen = BTreeSet::new();
    let strategy = setup_strategy(Shape {
        policy: PolicyChoice::Any,
        limited: true,
    });
    for _ in 0..500 {
        note_options(
            &strategy.new_tree(&mut runner).unwrap().current().conf,
            &mut seen,
        );
    }
    assert_every_option(&seen, "random configuration");
}
