//! State shared by a pool and its blocks.

use std::borrow::BorrowMut;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::Residency;
use super::block::{BlockParts, TRANSFERRED};
use super::error::PoolError;
use super::options::{FreeTiming, HeldLimitAction};
use super::record_shelf::RecordShelf;
use super::reference_bank::ReferenceBank;
use super::residence::UseClock;
use super::residents::{Residents, free_host};
use super::reuse_cache::{self, CacheOwner, ReuseCache};
use super::state_lock::{StateGuard, StateLock};
use super::submissions::DeviceSubmissions;
use crate::engine::{BlockId, Engine, SegmentId, SegmentKind};
use crate::format::bytes;
use crate::gpu::{DeviceLost, ErrorLog};
use crate::memory::Backing;
use crate::memory::HostTier;

/// Binding limits of the pool's usage, read from the device once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BindingLimits {
    /// Largest binding, in bytes.
    pub binding_limit: u64,
    /// `storage`, `uniform` or `buffer`.
    pub binding_kind: &'static str,
    /// Offset alignment of bindings.
    pub offset_alignment: u64,
}

pub(crate) struct PoolState {
    pub engine: Engine,
    /// Segment buffers or address ranges: what the engine places device blocks in.
    pub memory: Backing,
    /// Why the pool runs in its memory mode (for pages: the page size; for segments: what
    /// kept it from mapping pages).
    pub mode_reason: String,
    /// Host-resident segments, made on first overflow or offload.
    pub host: Option<HostTier>,
    /// Blocks dropped while a recording that exposed them is not submitted yet: still
    /// allocated, freed at the submission point that closes the last such recording.
    pub held: Vec<BlockParts>,
    /// The bytes of `held`.
    pub held_bytes: u64,
    /// Whether the held-limit warning was given since held bytes were last under half the
    /// limit.
    pub held_warned: bool,
    /// Allocations served from host memory because the device was full (`overflow:host`).
    pub host_overflows: u64,
    /// Live labelled blocks (held ones included), by residency and engine id.
    pub labels: HashMap<(Residency, BlockId), LabelledBlock>,
    /// The residency manager, in a pool with residency.
    pub residents: Option<Residents>,
    /// Records of freed blocks, for the next blocks of their segments.
    pub shelf: RecordShelf,
    /// References to the pool that drained blocks gave back, for the next blocks; banked
    /// only while a `Pool` handle is open.
    pub references: ReferenceBank<PoolShared>,
}

/// Where a live labelled block is.
#[derive(Debug, Clone)]
pub(crate) struct LabelledBlock {
    pub label: Arc<str>,
    pub segment: SegmentId,
    pub offset: u64,
    pub capacity: u64,
}

impl PoolState {
    /// Notes a labelled block that was just placed.
    pub fn add_label(&mut self, parts: &BlockParts) {
        if let Some(label) = &parts.label {
            self.labels.insert(
                (parts.residency, parts.id),
                LabelledBlock {
                    label: label.clone(),
                    segment: parts.segment,
                    offset: parts.offset,
                    capacity: parts.capacity,
                },
            );
        }
    }
}

/// Everything behind a [`Pool`](super::Pool) handle and its [`Block`](super::Block)s.
pub(crate) struct PoolShared {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: BindingLimits,
    /// The engine and everything else the pool changes under its lock; biased to the
    /// pool's first thread (see `owner_bias`).
    pub state: StateLock<PoolState>,
    pub reuse: ReuseCache<PoolShared, BlockParts>,
    /// Live `Pool` handles; blocks are parked for reuse only while one exists.
    pub handles: AtomicUsize,
    /// Whether host-resident blocks can be bound (`MAPPABLE_PRIMARY_BUFFERS`).
    pub host_bindable: bool,
    /// Label prefix of segment buffers.
    pub label: String,
    /// Usages of every segment buffer and range.
    pub usage: wgpu::BufferUsages,
    /// When dropped blocks may be reused.
    pub free_timing: FreeTiming,
    /// Device memory that `per_process_memory_fraction` applies to, if known.
    pub device_memory: Option<u64>,
    /// The recordings and submission points of the device, shared by its pools.
    pub submissions: Arc<DeviceSubmissions>,
    /// The memory layer's count of calls that may change device memory (`Backing::changes`).
    pub memory_changes: Arc<AtomicU64>,
    /// The bound on held bytes, resolved to bytes (`None`: no bound).
    pub held_limit: Option<u64>,
    /// What passing `held_limit` does.
    pub held_limit_action: HeldLimitAction,
    /// Set while held bytes are over a [`HeldLimitAction::Error`] bound: allocations fail.
    pub over_held_limit: AtomicBool,
    /// Blocks in the state's held list (counted just before they enter it, see `release`).
    pub held_blocks: AtomicUsize,
    /// Bytes of dropped (or moved) blocks kept from reuse by `BlockRef`s.
    pub referenced_bytes: AtomicU64,
    /// Whether the history records (`Pool::record_history`): the reuse cache is bypassed.
    pub recording: AtomicBool,
    /// Whether the configuration turns the reuse cache off (`reuse_cache`,
    /// [`Config::reuses_blocks`](crate::config::Config::reuses_blocks)).
    pub reuse_off: bool,
    /// Log the blocks still allocated when the last `Pool` handle drops.
    pub log_leaks: bool,
    /// Ticks once per use of a block that residency tracks.
    pub use_clock: UseClock,
    /// The device's loss record, where the pool was given one.
    pub error_log: Option<ErrorLog>,
}

impl PoolShared {
    /// `Err` once the device is known to be lost: one branch and one atomic load.
    #[inline]
    pub fn check_device(&self) -> Result<(), DeviceLost> {
        match &self.error_log {
            Some(log) => log.check_device(),
            None => Ok(()),
        }
    }

    /// Whether requests and frees go through the engine, not the reuse cache: the history
    /// records, or the configuration turns the cache off.
    #[inline]
    pub fn bypasses_cache(&self) -> bool {
        self.reuse_off || self.recording()
    }

    /// Whether the history records.
    #[inline]
    pub fn recording(&self) -> bool {
        self.recording.load(Ordering::Acquire)
    }

    /// Locks the state: without a locked instruction on the pool's owner thread while its
    /// bias holds (see `owner_bias`). wgpool runs no caller code and does not panic while it
    /// holds the lock, so a panic that unwound through some other path leaves it usable.
    #[inline]
    pub fn lock(&self) -> StateGuard<'_, PoolState> {
        self.state.lock()
    }

    /// Whether dropped blocks wait for the recordings that exposed them
    /// ([`FreeTiming::AfterSubmit`]).
    #[inline]
    pub fn holds_for_recordings(&self) -> bool {
        self.free_timing == FreeTiming::AfterSubmit
    }

    /// Takes a dropped block and its handle's pool reference: to the references that still
    /// share its place, into the held blocks, into the reuse cache, or back to the engine.
    pub fn release(shared: Arc<PoolShared>, mut parts: Box<BlockParts>) {
        if let Some(place) = parts.share.take() {
            // References may still bind this memory: the last of them (or this one) frees it.
            place.adopt(parts);
            return;
        }
        if shared.may_be_recorded(&parts) {
            let mut state = shared.lock();
            // Counted before asking again. A submission point closes recordings, then reads
            // the counts (all sequentially consistent, as the recordings' close and check
            // are), then takes this lock to release: if it closed the block's last
            // recording before the check below, the check sees that and the block is freed
            // here; if after, it finds the count above zero and releases the block once this
            // lock is free. Either way no held block waits for a later submission point.
            shared.count_held(1, 0);
            if shared.may_be_recorded(&parts) {
                shared.hold(&mut state, *parts);
            } else {
                shared.count_held(0, 1);
                free_to_shelf(&mut state, parts);
            }
            return;
        }
        if parts.residency == Residency::Host || parts.label.is_some() || parts.residence.is_some()
        {
            // Host blocks, labelled blocks and blocks residency tracks return through the
            // engine: the reuse cache serves untracked device blocks without labels only.
            let mut state = shared.lock();
            free_to_shelf(&mut state, parts);
            return;
        }
        if shared.bypasses_cache() {
            let mut state = shared.lock();
            free_to_shelf(&mut state, parts);
            return;
        }
        if let Err((shared, parts)) = reuse_cache::park(shared, parts) {
            // A full cache goes back to the engine with this block, under the one lock this
            // free takes anyway (the engine sees the frees in the order they happened), so
            // that the frees after it park again instead of each taking the lock. Training
            // traces free runs of more than CAPACITY blocks at a time: a quarter of their
            // frees came here.
            let mut state = if shared.reuse.is_full() {
                shared.lock_flushed()
            } else {
                shared.lock()
            };
            free_to_shelf(&mut state, parts);
        }
    }

    /// Whether an open recording may name the block: it must then be held back.
    #[inline]
    pub fn may_be_recorded(&self, parts: &BlockParts) -> bool {
        self.holds_for_recordings() && self.submissions.recordings.may_name(&parts.exposure)
    }

    /// Counts blocks about to be held back (`added`) or released (`released`), in this pool
    /// and in the device's total: submission points skip pools whose count is zero without
    /// locking them (see `release` for why a block is counted before it is held).
    fn count_held(&self, added: usize, released: usize) {
        if added > 0 {
            self.held_blocks.fetch_add(added, Ordering::SeqCst);
        }
        if released > 0 {
            self.held_blocks.fetch_sub(released, Ordering::SeqCst);
        }
        self.submissions.count_held(added, released);
    }

    /// Holds a dropped block (already counted, see `count_held`) back until the recordings
    /// that exposed it are submitted, and warns or refuses allocations past the held limit.
    fn hold(&self, state: &mut PoolState, parts: BlockParts) {
        state.held_bytes += parts.capacity;
        state.held.push(parts);
        let Some(limit) = self.held_limit else {
            return;
        };
        if state.held_bytes <= limit {
            return;
        }
        if self.held_limit_action == HeldLimitAction::Error {
            self.over_held_limit.store(true, Ordering::Release);
        }
        if !state.held_warned {
            state.held_warned = true;
            log::warn!(
                "{}: {} in {} dropped blocks wait for their recorded commands to be submitted, \
                 over the held limit of {}. {}",
                self.label,
                bytes(state.held_bytes),
                state.held.len(),
                bytes(limit),
                MISSING_SUBMIT
            );
        }
    }

    /// Frees the held blocks that no open recording may name. Takes the pool's lock only when
    /// it holds blocks back: a submission point on one thread leaves the pools of other
    /// threads (and their owner bias) alone while they hold none.
    pub fn release_held(&self) {
        if self.held_blocks.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut state = self.lock();
        if state.held.is_empty() {
            return;
        }
        // Taken under the state lock: every held block's span was set before it was pushed,
        // so before this snapshot; recordings opened after it have larger tickets than any
        // such span.
        let open = self.submissions.recordings.open_tickets();
        let held = std::mem::take(&mut state.held);
        let mut released = 0;
        for parts in held {
            if open.may_name(&parts.exposure) {
                state.held.push(parts);
            } else {
                state.held_bytes -= parts.capacity;
                released += 1;
                free_to_engine(&mut state, parts);
            }
        }
        self.count_held(0, released);
        if let Some(limit) = self.held_limit
            && state.held_bytes <= limit / 2
        {
            state.held_warned = false;
        }
        if self
            .held_limit
            .is_none_or(|limit| state.held_bytes <= limit)
        {
            self.over_held_limit.store(false, Ordering::Release);
        }
    }

    /// Locks the state and returns every block of the reuse cache to the engine first, so
    /// that the engine sees all free memory and exact statistics. The returned blocks'
    /// records go on the record shelf; their references to the pool go to the reference
    /// bank while a `Pool` handle is open (so that the next allocations take them instead of
    /// counting the pool's references up and down again), else they are dropped.
    pub fn lock_flushed(&self) -> StateGuard<'_, PoolState> {
        let mut state = self.lock();
        let state_ref = &mut *state;
        // Read under the state lock: the last handle counts `handles` down before it takes
        // the lock to release the bank, so nothing banked here outlives that release.
        let bank = self.handles.load(Ordering::Acquire) > 0;
        // Dropping the parked blocks' pool references is safe: the caller reached `self`
        // through a reference of its own, so none of these is the last one.
        let counts = self.reuse.drain(|reference, parts| {
            free_to_shelf(state_ref, parts);
            if bank {
                state_ref.references.deposit(self, reference);
            }
        });
        let Some(counts) = counts else {
            return state;
        };
        for kind in [SegmentKind::Small, SegmentKind::Large] {
            let i = kind.index();
            if counts.reuses[i] > 0 {
                let oversize = if kind == SegmentKind::Large {
                    counts.oversize
                } else {
                    0
                };
                state.engine.record_reuse(
                    kind,
                    counts.reuses[i],
                    counts.bytes[i],
                    counts.requested[i],
                    oversize,
                );
            }
        }
        state
    }
}

impl Drop for PoolShared {
    /// Blocks still held back die with the pool: the device's count of held blocks, which
    /// decides whether submission points look at its pools at all, lets go of them.
    fn drop(&mut self) {
        let held = *self.held_blocks.get_mut();
        if held > 0 {
            self.submissions.count_held(0, held);
        }
    }
}

impl CacheOwner for PoolShared {
    type Parts = BlockParts;

    fn cache(&self) -> &ReuseCache<PoolShared, BlockParts> {
        &self.reuse
    }

    fn open_handles(&self) -> &AtomicUsize {
        &self.handles
    }
}

impl PoolShared {
    /// The host tier, made now if this is its first use.
    pub fn host_tier<'a>(&self, state: &'a mut PoolState) -> Result<&'a mut HostTier, PoolError> {
        if state.host.is_none() {
            let limit = state.residents.as_ref().and_then(|r| r.host_limit);
            state.host = Some(
                HostTier::new(&self.device, state.engine.config(), &self.label, limit)
                    .map_err(PoolError::Config)?,
            );
        }
        Ok(state.host.as_mut().expect("just made"))
    }
}

/// What to do when dropped blocks pile up waiting for a submission point that never comes.
pub(crate) const MISSING_SUBMIT: &str = "Commands that use them were recorded on some thread \
     that has not reached a submission point: submit them through Pool::submit, or call \
     Pool::mark_submitted (or wgpool::pool::mark_submitted(&device)) after queue.submit, on \
     the thread that recorded them. If another thread submits its command buffers, hand the \
     recording over with Pool::take_recording, or call Pool::mark_all_submitted once \
     everything recorded so far is submitted.";

/// Returns a block to the engine that handed it out, and its record to the record shelf.
pub(crate) fn free_to_shelf(state: &mut PoolState, mut parts: Box<BlockParts>) {
    free_to_engine(state, &mut *parts);
    state.shelf.put(parts);
}

/// Returns a block to the engine that handed it out. The record itself stays with the
/// caller (boxed or not), to be dropped or reused for another block: what it names is no
/// longer the block's once this returns.
pub(crate) fn free_to_engine(state: &mut PoolState, mut parts: impl BorrowMut<BlockParts>) {
    let parts = parts.borrow_mut();
    // A block is freed exactly once (when its handle is dropped or after a move), so its id
    // is live in the engine of its residency.
    if parts.label.is_some() {
        state.labels.remove(&(parts.residency, parts.id));
    }
    if let Some(residence) = parts.residence.take() {
        if residence.moved.load(Ordering::Relaxed) {
            // The pool's copies reached the block's bytes.
            parts.gpu_work.fetch_or(TRANSFERRED, Ordering::Relaxed);
        }
        if let Some(copy) = state.residents.as_mut().and_then(|r| r.forget(parts.id)) {
            free_host(state, copy);
        }
    }
    let freed = match parts.residency {
        Residency::Device => {
            state.memory.block_freed(
                parts.segment,
                parts.offset,
                parts.capacity,
                parts.wrapper,
                (
                    parts.gpu_work.load(Ordering::Relaxed),
                    parts.inherited_work.load(Ordering::Relaxed),
                ),
            );
            if let Some(log) = &mut state.memory.history
                && let Some(allocation) = state.engine.allocation(parts.id)
            {
                log.block(
                    crate::history::Action::FreeCompleted,
                    &allocation,
                    0,
                    crate::history::now_us(),
                );
            }
            state.engine.free(parts.id, &mut state.memory)
        }
        Residency::Host => match state.host.as_mut() {
            Some(host) => host.engine.free(parts.id, &mut host.segments),
            // A host block exists only once the host tier does.
            None => Ok(()),
        },
    };
    debug_assert!(freed.is_ok(), "{freed:?}");
}
