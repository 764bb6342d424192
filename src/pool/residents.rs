//! The residency manager of a pool in pages mode: which tracked blocks are on the device, and
//! moving them out and back.
//!
//! Evicting a block copies its whole interior pages into a host block of the pool's host
//! tier (through the block's own wrapper, so that wgpu orders the copy after the
//! application's work on the block), then unmaps them; the unbind waits on the GPU for
//! everything submitted before it, the copy included. Restoring maps fresh pages at the same
//! offsets, copies the contents back, and frees the host block. The block keeps its buffer
//! and offset throughout: bind groups that name it stay valid.
//!
//! Two declarations by the application save copies:
//! - a **read-only** block keeps its host copy when it is restored (the copy stays current,
//!   since nothing writes the block), so evicting it again only unmaps. Kept copies are a
//!   cache: when the host limit refuses a block, they are dropped, most recently used block
//!   first, before the refusal stands;
//! - a **discarded** block's contents are not needed before its next use: an evicted one is
//!   restored without a copy, one on the device is evicted without one.
//!
//! Everything here runs under the pool's lock; see [`Residence`] for how uses that do not
//! take it meet an eviction.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::block::BlockParts;
use super::error::ResidencyError;
use super::pool_shared::{PoolShared, PoolState};
use super::residence::Residence;
use super::{Residency, ResidencyStats};
use crate::engine::{AllocError, BlockId, EvictError, RoomShortfall};
use crate::gpu::scope::catch;
use crate::history::{Action, EVICTED, RESTORED};
use crate::memory::residency::{Candidate, Hold, choose_victims};

/// The tracked blocks of a pool with residency, and its budgets.
pub(crate) struct Residents {
    /// The device budget: the engine's cap was lowered to it.
    pub budget: u64,
    /// The host limit (the host tier's cap), if any.
    pub host_limit: Option<u64>,
    entries: HashMap<BlockId, Entry>,
    counters: Counters,
}

struct Entry {
    residence: Arc<Residence>,
    /// The host copy of the block's contents: an evicted block's (none when it was
    /// discarded), or, for a read-only block on the device, the copy it was restored from.
    host: Option<BlockParts>,
    /// Whether the block's pages are unmapped.
    evicted: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    evictions: u64,
    evicted_total: u64,
    copied_out_total: u64,
    restores: u64,
    restored_total: u64,
    copied_in_total: u64,
    move_time: Duration,
}

/// Why room could not be made.
#[derive(Debug)]
pub(crate) enum RoomError {
    /// Every block that may go would not free enough.
    Short(RoomShortfall),
    /// Evicting failed: host memory, the copy, or the unmap.
    Failed(ResidencyError),
}

impl Residents {
    /// A manager with no block, under `budget` on the device and `host_limit` on the host.
    pub fn new(budget: u64, host_limit: Option<u64>) -> Residents {
        Residents {
            budget,
            host_limit,
            entries: HashMap::new(),
            counters: Counters::default(),
        }
    }

    /// Starts tracking a block just placed, if it has whole pages inside: `parts` gets its
    /// [`Residence`].
    pub fn track(&mut self, parts: &mut BlockParts, run: std::ops::Range<u64>, now: u64) {
        let residence = Arc::new(Residence::new(parts.id, parts.buffer.clone(), run, now));
        self.entries.insert(
            parts.id,
            Entry {
                residence: residence.clone(),
                host: None,
                evicted: false,
            },
        );
        parts.residence = Some(residence);
    }

    /// Stops tracking a block being freed, returning its host copy (if it was evicted) for
    /// the caller to free.
    pub fn forget(&mut self, id: BlockId) -> Option<BlockParts> {
        self.entries.remove(&id).and_then(|entry| entry.host)
    }

    /// The figures of [`Pool::residency_stats`](super::Pool::residency_stats).
    pub fn stats(&self) -> ResidencyStats {
        let mut stats = ResidencyStats {
            budget_bytes: self.budget,
            host_limit_bytes: self.host_limit,
            tracked_blocks: self.entries.len() as u64,
            evictions: self.counters.evictions,
            evicted_bytes_total: self.counters.evicted_total,
            copied_out_bytes_total: self.counters.copied_out_total,
            restores: self.counters.restores,
            restored_bytes_total: self.counters.restored_total,
            copied_in_bytes_total: self.counters.copied_in_total,
            move_time: self.counters.move_time,
            ..ResidencyStats::default()
        };
        for entry in self.entries.values() {
            let bytes = entry.residence.bytes();
            if entry.evicted {
                stats.evicted_blocks += 1;
                stats.evicted_bytes += bytes;
            } else {
                stats.resident_bytes += bytes;
                if entry.host.is_some() {
                    stats.kept_copy_bytes += bytes;
                }
            }
            if entry.residence.is_read_only() {
                stats.read_only_blocks += 1;
            }
            if entry.residence.pins.load(Ordering::Relaxed) > 0 {
                stats.pinned_blocks += 1;
            }
        }
        stats
    }

    /// Zeroes the counters of moves.
    pub fn reset_counters(&mut self) {
        self.counters = Counters::default();
    }
}

/// How many times [`PoolShared::make_room`] chooses blocks to evict when every block it chose
/// came into use before it could evict it.
const ROOM_ATTEMPTS: u32 = 4;

/// Runs `attempt` (one choice and eviction, returning the bytes freed) until it frees
/// something, at most [`ROOM_ATTEMPTS`] times; its errors end the retries at once. Nothing
/// freed after the last attempt is a shortfall of `needed` bytes with no block to blame.
fn retry_room(
    needed: u64,
    mut attempt: impl FnMut() -> Result<u64, RoomError>,
) -> Result<u64, RoomError> {
    for _ in 0..ROOM_ATTEMPTS {
        match attempt()? {
            0 => continue,
            freed => return Ok(freed),
        }
    }
    // Every block chosen, each time, came into use meanwhile.
    Err(RoomError::Short(RoomShortfall {
        needed,
        ..RoomShortfall::default()
    }))
}

impl PoolShared {
    /// Evicts tracked blocks, least recently used first, until `needed` device bytes came
    /// free, never one in `keep`, pinned, or in use (see [`Residence`]). Returns the bytes
    /// freed, which may fall short when a block chosen became in use meanwhile.
    ///
    /// Other threads mark blocks in use without the pool's lock, so every block chosen may
    /// come into use between the choice and its eviction. When that leaves nothing freed,
    /// the choice is made again from a fresh look at every block (up to
    /// [`ROOM_ATTEMPTS`] times) before the request is refused: a race lost to another
    /// thread is not an out-of-memory.
    pub(crate) fn make_room(
        &self,
        state: &mut PoolState,
        needed: u64,
        keep: &[BlockId],
    ) -> Result<u64, RoomError> {
        retry_room(needed, || self.make_room_once(state, needed, keep))
    }

    /// One choice of blocks to evict for [`make_room`](Self::make_room), and their
    /// eviction: the bytes freed (0 when every block chosen came into use meanwhile).
    fn make_room_once(
        &self,
        state: &mut PoolState,
        needed: u64,
        keep: &[BlockId],
    ) -> Result<u64, RoomError> {
        let Some(residents) = &state.residents else {
            return Err(RoomError::Short(RoomShortfall {
                needed,
                ..RoomShortfall::default()
            }));
        };
        let open = self.submissions.recordings.open_tickets();
        let mut ids = Vec::with_capacity(residents.entries.len());
        let mut candidates = Vec::with_capacity(residents.entries.len());
        for (id, entry) in &residents.entries {
            if entry.evicted {
                continue;
            }
            let residence = &entry.residence;
            let hold = if residence.pins.load(Ordering::SeqCst) > 0 {
                Hold::Pinned
            } else if residence.busy.load(Ordering::SeqCst) > 0 || residence.tickets.any_open(&open)
            {
                Hold::InUse
            } else if keep.contains(id) {
                Hold::Kept
            } else {
                Hold::None
            };
            candidates.push(Candidate {
                key: ids.len() as u64,
                bytes: residence.bytes(),
                last_use: residence.last_use.load(Ordering::Relaxed),
                hold,
            });
            ids.push(*id);
        }
        let victims = choose_victims(&mut candidates, needed).map_err(|short| {
            RoomError::Short(RoomShortfall {
                needed: short.needed,
                evictable: short.evictable,
                pinned: short.pinned,
                in_use: short.in_use,
                kept: short.kept,
                host_full: None,
            })
        })?;
        let mut freed = 0;
        for key in victims {
            freed += self
                .evict_tracked(state, ids[key as usize])
                .map_err(RoomError::Failed)?;
        }
        Ok(freed)
    }

    /// Evicts tracked block `id` if nothing uses it (see [`Residence`]); returns the device
    /// bytes given back (0 when it was left alone or evicted already). On error the block
    /// is unchanged and on the device.
    pub(crate) fn evict_tracked(
        &self,
        state: &mut PoolState,
        id: BlockId,
    ) -> Result<u64, ResidencyError> {
        let start = Instant::now();
        let Some(entry) = state.residents.as_ref().and_then(|r| r.entries.get(&id)) else {
            return Ok(0);
        };
        if entry.evicted {
            return Ok(0);
        }
        let residence = entry.residence.clone();
        let kept = entry.host.is_some();
        residence.evicting.store(true, Ordering::SeqCst);
        if residence.held()
            || residence
                .tickets
                .any_open(&self.submissions.recordings.open_tickets())
        {
            residence.evicting.store(false, Ordering::SeqCst);
            return Ok(0);
        }
        // A kept copy is current (the block is read-only); a discarded block needs none.
        let copy_out = !kept && !residence.discarded.load(Ordering::SeqCst);
        let host = if copy_out {
            match self.host_copy_of(state, &residence) {
                Ok(host) => Some(host),
                Err(error) => {
                    residence.evicting.store(false, Ordering::SeqCst);
                    return Err(error);
                }
            }
        } else {
            None
        };
        // The copy is submitted: the unbind below waits, on the GPU, for everything
        // submitted so far. Ticking the work clock makes it signal anew.
        self.submissions.points.fetch_add(1, Ordering::SeqCst);
        state.memory.label_pages(Action::SegmentUnmap, EVICTED);
        let evicted = state.engine.evict(id, &mut state.memory);
        state.memory.unlabel_pages();
        let bytes = match evicted {
            Ok(bytes) => bytes,
            Err(error) => {
                if let Some(host) = host {
                    free_host(state, host);
                }
                residence.evicting.store(false, Ordering::SeqCst);
                return Err(ResidencyError::Pages(error));
            }
        };
        residence.moved.store(true, Ordering::Relaxed);
        let residents = state.residents.as_mut().expect("checked above");
        let entry = residents.entries.get_mut(&id).expect("checked above");
        if host.is_some() {
            entry.host = host;
            residents.counters.copied_out_total += residence.bytes();
        }
        entry.evicted = true;
        residents.counters.evictions += 1;
        residents.counters.evicted_total += bytes;
        residents.counters.move_time += start.elapsed();
        Ok(bytes)
    }

    /// A host block holding a copy of the block's interior, the copy submitted.
    fn host_copy_of(
        &self,
        state: &mut PoolState,
        residence: &Residence,
    ) -> Result<BlockParts, ResidencyError> {
        let bytes = residence.bytes();
        let copy = match self.host_block(state, bytes) {
            Ok(copy) => copy,
            Err(HostBlockError::Tier(error)) => return Err(ResidencyError::HostTier(error)),
            Err(HostBlockError::Alloc(AllocError::OutOfMemory(oom))) => {
                return Err(ResidencyError::HostLimit {
                    needed: bytes,
                    limit: oom.cap,
                });
            }
            Err(HostBlockError::Alloc(error)) => return Err(ResidencyError::HostAlloc(error)),
        };
        let copied = self.copy(
            &residence.buffer,
            residence.run.start,
            &copy.buffer,
            copy.offset,
            bytes,
        );
        if let Err(error) = copied {
            free_host(state, copy);
            return Err(error);
        }
        Ok(copy)
    }

    /// Brings evicted block `id` back: maps its pages (evicting others, never one in
    /// `keep`, when the budget has no room), copies its contents back and frees the host
    /// copy. Returns the bytes restored (0 for a block on the device or not tracked).
    pub(crate) fn restore_tracked(
        &self,
        state: &mut PoolState,
        id: BlockId,
        keep: &[BlockId],
    ) -> Result<u64, ResidencyError> {
        let start = Instant::now();
        let Some(entry) = state.residents.as_ref().and_then(|r| r.entries.get(&id)) else {
            return Ok(0);
        };
        if !entry.evicted {
            return Ok(0);
        }
        let residence = entry.residence.clone();
        // Evictions made for room count their own time.
        let moved_before = state
            .residents
            .as_ref()
            .map_or(Duration::ZERO, |r| r.counters.move_time);
        let mut keep_too = keep.to_vec();
        keep_too.push(id);
        let mut attempts = 0;
        loop {
            state.memory.label_pages(Action::SegmentMap, RESTORED);
            let restored = state.engine.restore(id, &mut state.memory);
            state.memory.unlabel_pages();
            match restored {
                Ok(_) => break,
                Err(EvictError::NoRoom { bytes, .. }) if attempts < 4 => {
                    attempts += 1;
                    // Ask for a little more each time: the cap counts pages a block shares.
                    let needed = bytes << (attempts - 1);
                    match self.make_room(state, needed, &keep_too) {
                        Ok(_) => {}
                        Err(RoomError::Short(short)) => {
                            return Err(ResidencyError::NoRoom {
                                budget: state.residents.as_ref().map_or(0, |r| r.budget),
                                shortfall: short,
                            });
                        }
                        Err(RoomError::Failed(error)) => return Err(error),
                    }
                }
                Err(EvictError::NoRoom { bytes, .. }) => {
                    return Err(ResidencyError::NoRoom {
                        budget: state.residents.as_ref().map_or(0, |r| r.budget),
                        shortfall: RoomShortfall {
                            needed: bytes,
                            ..RoomShortfall::default()
                        },
                    });
                }
                Err(error) => return Err(ResidencyError::Pages(error)),
            }
        }
        let residents = state.residents.as_mut().expect("checked above");
        let entry = residents.entries.get_mut(&id).expect("checked above");
        let bytes = residence.bytes();
        // A discarded block has no copy: its fresh pages hold whatever they held.
        let copied_in = match entry.host.take() {
            Some(host) => {
                if let Err(error) = self.copy(
                    &host.buffer,
                    host.offset,
                    &residence.buffer,
                    residence.run.start,
                    bytes,
                ) {
                    // Unmap the fresh pages again: the block stays evicted, its copy kept.
                    let _ = state.engine.evict(id, &mut state.memory);
                    let residents = state.residents.as_mut().expect("checked above");
                    residents.entries.get_mut(&id).expect("checked above").host = Some(host);
                    return Err(error);
                }
                if residence.is_read_only() {
                    // Still the block's contents: the next eviction needs no copy.
                    let residents = state.residents.as_mut().expect("checked above");
                    residents.entries.get_mut(&id).expect("checked above").host = Some(host);
                } else {
                    free_host(state, host);
                }
                bytes
            }
            None => 0,
        };
        residence.evicting.store(false, Ordering::SeqCst);
        let residents = state.residents.as_mut().expect("checked above");
        residents
            .entries
            .get_mut(&id)
            .expect("checked above")
            .evicted = false;
        residents.counters.restores += 1;
        residents.counters.restored_total += bytes;
        residents.counters.copied_in_total += copied_in;
        let nested = residents.counters.move_time.saturating_sub(moved_before);
        residents.counters.move_time += start.elapsed().saturating_sub(nested);
        Ok(bytes)
    }

    /// Copies `bytes` from `from` at `from_offset` to `to` at `to_offset`, submitted now.
    fn copy(
        &self,
        from: &wgpu::Buffer,
        from_offset: u64,
        to: &wgpu::Buffer,
        to_offset: u64,
        bytes: u64,
    ) -> Result<(), ResidencyError> {
        let PoolShared { device, queue, .. } = self;
        catch(device, || {
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgpool residency"),
            });
            encoder.copy_buffer_to_buffer(from, from_offset, to, to_offset, bytes);
            queue.submit([encoder.finish()]);
        })
        .map_err(ResidencyError::Copy)
    }
}

/// Why a host block could not be had.
pub(crate) enum HostBlockError {
    /// The host tier could not be set up.
    Tier(crate::pool::PoolError),
    /// Its engine refused, after kept copies were dropped.
    Alloc(AllocError),
}

impl PoolShared {
    /// A host block of `bytes` from the host tier. When the host limit refuses it, the
    /// copies kept for read-only blocks on the device are dropped (they are only a cache)
    /// and the request is tried once more.
    pub(crate) fn host_block(
        &self,
        state: &mut PoolState,
        bytes: u64,
    ) -> Result<BlockParts, HostBlockError> {
        let mut dropped = false;
        loop {
            let host = self.host_tier(state).map_err(HostBlockError::Tier)?;
            match host.engine.allocate(bytes, 0, &mut host.segments) {
                Ok(allocation) => {
                    let buffer = host.segments.buffer(allocation.segment).clone();
                    return Ok(BlockParts::new(allocation, buffer, Residency::Host));
                }
                Err(AllocError::OutOfMemory(oom)) if !dropped => {
                    dropped = true;
                    if drop_kept_copies(state, bytes) == 0 {
                        return Err(HostBlockError::Alloc(AllocError::OutOfMemory(oom)));
                    }
                }
                Err(error) => return Err(HostBlockError::Alloc(error)),
            }
        }
    }

    /// Declares tracked block `id` read-only or not (see the module documentation). Taking
    /// the declaration back drops a kept copy: the block may be written from now on.
    pub(crate) fn set_read_only(&self, state: &mut PoolState, id: BlockId, read_only: bool) {
        let Some(entry) = state
            .residents
            .as_mut()
            .and_then(|r| r.entries.get_mut(&id))
        else {
            return;
        };
        entry.residence.read_only.store(read_only, Ordering::SeqCst);
        if !read_only && !entry.evicted {
            if let Some(copy) = entry.host.take() {
                free_host(state, copy);
            }
        }
    }

    /// Discards tracked block `id`'s contents (see the module documentation): an evicted
    /// block's host copy is freed, a block on the device is marked so that its eviction
    /// copies nothing.
    pub(crate) fn discard(&self, state: &mut PoolState, id: BlockId) {
        let Some(entry) = state
            .residents
            .as_mut()
            .and_then(|r| r.entries.get_mut(&id))
        else {
            return;
        };
        if !entry.evicted {
            entry.residence.discarded.store(true, Ordering::SeqCst);
        }
        if let Some(copy) = entry.host.take() {
            free_host(state, copy);
        }
    }
}

/// Drops copies kept for read-only blocks on the device, most recently used block first
/// (the last to be evicted again), until at least `needed` bytes were freed or none is
/// left. Returns the bytes freed.
fn drop_kept_copies(state: &mut PoolState, needed: u64) -> u64 {
    let Some(residents) = state.residents.as_mut() else {
        return 0;
    };
    let mut kept: Vec<(u64, BlockId)> = residents
        .entries
        .iter()
        .filter(|(_, entry)| !entry.evicted && entry.host.is_some())
        .map(|(id, entry)| (entry.residence.last_use.load(Ordering::Relaxed), *id))
        .collect();
    kept.sort_unstable_by_key(|&(last_use, _)| std::cmp::Reverse(last_use));
    let mut freed = 0;
    for (_, id) in kept {
        if freed >= needed {
            break;
        }
        let residents = state.residents.as_mut().expect("checked above");
        let entry = residents.entries.get_mut(&id).expect("listed above");
        if let Some(copy) = entry.host.take() {
            freed += copy.size;
            free_host(state, copy);
        }
    }
    freed
}

/// Frees a host copy to the host tier.
pub(crate) fn free_host(state: &mut PoolState, copy: BlockParts) {
    if let Some(host) = state.host.as_mut() {
        let freed = host.engine.free(copy.id, &mut host.segments);
        debug_assert!(freed.is_ok(), "{freed:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_lost_to_other_threads_is_made_again() {
        // Every block chosen came into use twice, then a choice freed 8 KiB.
        let mut results = vec![0, 0, 8192].into_iter();
        let mut calls = 0;
        let freed = retry_room(4096, || {
            calls += 1;
            Ok(results.next().expect("no more attempts than results"))
        });
        assert!(matches!(freed, Ok(8192)), "{freed:?}");
        assert_eq!(calls, 3);
    }

    #[test]
    fn nothing_freed_in_every_attempt_is_a_shortfall_of_what_was_needed() {
        let mut calls = 0;
        let freed = retry_room(4096, || {
            calls += 1;
            Ok(0)
        });
        assert_eq!(calls, ROOM_ATTEMPTS);
        match freed {
            Err(RoomError::Short(short)) => {
                assert_eq!(short.needed, 4096);
                assert_eq!(short.evictable, 0);
            }
            other => panic!("expected a shortfall, got {other:?}"),
        }
    }

    #[test]
    fn a_real_shortfall_is_not_retried() {
        let mut calls = 0;
        let freed = retry_room(4096, || {
            calls += 1;
            Err(RoomError::Short(RoomShortfall {
                needed: 4096,
                pinned: 4096,
                ..RoomShortfall::default()
            }))
        });
        assert_eq!(calls, 1);
        assert!(
            matches!(&freed, Err(RoomError::Short(short)) if short.pinned == 4096),
            "{freed:?}"
        );
    }
}
