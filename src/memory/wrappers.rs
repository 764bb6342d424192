//! Which wgpu buffer each block of an address range is reached through.
//!
//! wgpu tracks usage per `wgpu::Buffer`: a kernel that writes a block is a read-write use of
//! the whole buffer, and the next read-write use of that buffer in the same pass gets a
//! pipeline barrier, which on Vulkan waits for *all* earlier compute work. A pages-mode pool
//! whose blocks all went through the range's one buffer paid a barrier between any two
//! dispatches (12.7x on an H200 for 1,000 fills of 64 KiB). So each range has several
//! *wrappers* (the same `VkBuffer` wrapped again for wgpu, tracked apart; see
//! [`PagedMemory::alias_buffer`]), and a block is handed out through one of them.
//!
//! A barrier waits for all earlier work whatever buffer it names, so a few wrappers shared
//! round-robin do not help a long pass: once a wrapper comes round again, every dispatch
//! pays one. What helps is that no two live blocks share a wrapper. So a block gets a
//! wrapper no live block of its range uses (the most recently idled one), and a new one is
//! made when none is idle, up to [`MAX_WRAPPERS`] per range; past that, wrappers are shared
//! round-robin (correct, only slower).
//!
//! # The rule that keeps reuse safe
//!
//! wgpu orders nothing between accesses to the same bytes through two different wrappers.
//! So when freed bytes go to a new block, the work of their previous occupant must be
//! ordered before the new block's work some other way:
//!
//! - every freed extent is recorded with the wrapper that reached it (*pending*);
//! - a new block that overlaps no pending extent takes any wrapper;
//! - a new block whose overlapped pending extents were all reached through one wrapper
//!   takes that wrapper: wgpu then orders the old and new work itself, as for any buffer
//!   (barriers within a command buffer, and between submissions);
//! - a new block whose overlapped pending extents disagree first orders all later GPU work
//!   after all submitted work ([`PagedMemory::order_after_submitted`]: a semaphore barrier
//!   on the GPU, or a CPU wait where binds are not ordered on the GPU); that settles every
//!   pending extent of every range, and the block takes any wrapper.
//!
//! The ordering covers submitted work only. That is enough because a block is freed to the
//! engine only once the commands recorded with it are submitted: under
//! [`FreeTiming::AfterSubmit`](super::FreeTiming) the pool holds it back until the
//! submission point, and [`FreeTiming::AtDrop`](super::FreeTiming) is the caller's promise
//! to drop only after submitting. A block dropped before its commands are submitted under
//! `AtDrop` is still ordered with a new block on its bytes when that block takes its wrapper
//! (the second case), which is what a single reused block always gets.
//!
//! The reuse cache hands a parked block out again with its wrapper, untouched: it never left
//! its bytes.
//!
//! # Only work that exists is ordered, once
//!
//! An ordering costs an empty submission (about a third of pages mode's time per operation
//! on a replay of a KV-cache decode on lavapipe, where nothing runs on the GPU at all). Two
//! facts make most of them unnecessary:
//!
//! - **Bytes no GPU work reached need no ordering.** A block records whether it was exposed
//!   (a binding, operand, slice or buffer taken) or reached by one of the crate's transfers
//!   or moves. Freed bytes of a block that was neither leave no pending extent.
//! - **An ordering settles all work submitted before it.** The device's *work clock* counts
//!   submission points. A freed extent is stamped with the clock when it is freed: under
//!   `AfterSubmit` an exposed block is freed only after the submission point that closed its
//!   last recording, so its work was submitted before the clock reached the stamp; a
//!   transfer ticks the clock when the block is freed, after the transfer was submitted. An
//!   ordering notes the clock it was issued at; an extent whose stamp is not later was
//!   submitted before it and is settled. Under `AtDrop` there are no submission points to
//!   trust, so every extent with work is stamped "never settled" and orders as before.
//!
//! A new block that takes over an unsettled extent with its wrapper (the second case) also
//! takes over its stamp, so the obligation is not lost if the new block leaves without work
//! of its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::gpu::sparse::PagedMemory;

/// A block's GPU work bit: the block was exposed (its binding, operand, slice or buffer
/// taken), so recorded commands may use it; their submission is marked by a submission point.
pub(crate) const EXPOSED: u8 = 1;
/// A block's GPU work bit: the crate submitted a transfer or move that reached the block's
/// bytes, with no submission point after it.
pub(crate) const TRANSFERRED: u8 = 2;

/// The device's work clock as a pool in pages mode reads it (see the module documentation).
#[derive(Clone, Debug, Default)]
pub(crate) struct WorkClock {
    /// Submission points reached on the device (shared by its pools).
    points: Arc<AtomicU64>,
    /// Whether the pool's blocks are freed only after their recordings' submission points
    /// (`FreeTiming::AfterSubmit`); else no stamp is ever settled.
    counted: bool,
}

/// The stamp of work that no ordering settles.
const NEVER_SETTLED: u64 = u64::MAX;

impl WorkClock {
    /// The clock of a device's submission points; `counted` as for the field.
    pub fn new(points: Arc<AtomicU64>, counted: bool) -> WorkClock {
        WorkClock { points, counted }
    }

    /// The submission points, where they are counted (`FreeTiming::AfterSubmit`).
    pub fn counted_points(&self) -> Option<Arc<AtomicU64>> {
        self.counted.then(|| self.points.clone())
    }

    /// The clock now.
    pub fn now(&self) -> u64 {
        self.points.load(Ordering::SeqCst)
    }

    /// The stamp of bytes freed now, after the GPU work `work` of their block (and any
    /// unsettled work it took over, `inherited`); `None` where no work reached them.
    pub fn stamp(&self, work: u8, inherited: u64) -> Option<u64> {
        if work == 0 {
            return (inherited != 0).then_some(inherited);
        }
        if !self.counted {
            return Some(NEVER_SETTLED);
        }
        let now = if work & TRANSFERRED != 0 {
            // The transfer was submitted before the block could be dropped; ticking now
            // puts its stamp after every ordering issued before it.
            self.points.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            self.now()
        };
        Some(now.max(inherited))
    }
}

/// Most wrappers made for one range; past it, live blocks share wrappers round-robin.
pub const MAX_WRAPPERS: usize = 1024;

/// The wrappers of every range of a pool in pages mode and the extents whose previous
/// occupant's work may still run.
#[derive(Default)]
pub(crate) struct Wrappers {
    ranges: Vec<Option<RangeWrappers>>,
    /// Extents settled by ordering all later GPU work after all submitted work.
    pub orderings: u64,
    /// The work clock when the last ordering was issued: extents stamped no later are
    /// settled.
    settled_until: u64,
    /// The device's work clock.
    pub clock: WorkClock,
}

#[derive(Default)]
struct RangeWrappers {
    /// Wrapper 0 is the range's own buffer; more are made on demand.
    buffers: Vec<wgpu::Buffer>,
    /// Live blocks (parked ones included) per wrapper.
    users: Vec<u32>,
    /// Wrappers that had no user when pushed; an entry whose wrapper has users again is
    /// stale and skipped.
    idle: Vec<u32>,
    /// Freed extents not yet settled: start -> (end, wrapper, stamp).
    pending: BTreeMap<u64, (u64, u32, u64)>,
    /// The next wrapper to share once [`MAX_WRAPPERS`] are made.
    next_shared: u32,
}

impl Wrappers {
    /// The wrapper (and its index) a new block at `offset..offset + size` of range `id`
    /// goes through, following the module's rule, and the stamp of unsettled work the block
    /// takes over with it (0 for none).
    pub fn assign(
        &mut self,
        pages: &mut PagedMemory,
        id: u32,
        offset: u64,
        size: u64,
    ) -> (&wgpu::Buffer, u32, u64) {
        let slot = id as usize;
        // The common case, kept apart from the rest so that it stays small: a known range
        // with no pending extent (no GPU work reached freed bytes) and an idle wrapper.
        let idle = match self.ranges.get_mut(slot) {
            Some(Some(range)) if range.pending.is_empty() => range.take_idle(),
            _ => None,
        };
        let (wrapper, inherited) = match idle {
            Some(wrapper) => (wrapper, 0),
            None => self.choose(pages, id, offset, size),
        };
        let range = self.ranges[slot].as_mut().expect("made by now");
        range.users[wrapper as usize] += 1;
        (&range.buffers[wrapper as usize], wrapper, inherited)
    }

    /// [`assign`](Self::assign)'s choice where the common case does not apply: makes the
    /// range's wrappers on first use, follows the module's rule over pending extents, and
    /// takes an unused wrapper where the rule leaves the choice free.
    #[inline(never)]
    fn choose(&mut self, pages: &mut PagedMemory, id: u32, offset: u64, size: u64) -> (u32, u64) {
        let slot = id as usize;
        if self.ranges.len() <= slot {
            self.ranges.resize_with(slot + 1, || None);
        }
        if self.ranges[slot].is_none() {
            let own = pages
                .buffer(id)
                .expect("the engine places blocks in live ranges")
                .clone();
            self.ranges[slot] = Some(RangeWrappers {
                buffers: vec![own],
                users: vec![0],
                idle: vec![0],
                ..RangeWrappers::default()
            });
        }
        let end = offset + size;
        let range = self.ranges[slot].as_mut().expect("just made");
        let previous = range.take_pending(offset, end, self.settled_until);
        let (chosen, inherited) = match previous {
            Previous::None => (None, 0),
            Previous::One(wrapper, stamp) => (Some(wrapper), stamp),
            Previous::Several => {
                // Read before the ordering: every submission point counted so far came
                // before it.
                let now = self.clock.now();
                pages.order_after_submitted();
                self.orderings += 1;
                self.settled_until = now;
                for range in self.ranges.iter_mut().flatten() {
                    range.pending.clear();
                }
                (None, 0)
            }
        };
        let range = self.ranges[slot].as_mut().expect("just made");
        let wrapper = match chosen {
            Some(wrapper) => wrapper,
            None => range.unused(pages, id),
        };
        (wrapper, inherited)
    }

    /// Notes that the block at `offset..offset + size` of range `id`, reached through
    /// `wrapper`, was freed: its extent is pending until settled when `stamp` says GPU work
    /// reached it (see [`WorkClock::stamp`]).
    pub fn freed(&mut self, id: u32, offset: u64, size: u64, wrapper: u32, stamp: Option<u64>) {
        let Some(range) = self.ranges.get_mut(id as usize).and_then(Option::as_mut) else {
            return;
        };
        if let Some(users) = range.users.get_mut(wrapper as usize) {
            *users = users.saturating_sub(1);
            if *users == 0 {
                range.idle.push(wrapper);
                if range.idle.len() > 2 * range.buffers.len() + 16 {
                    let users = &range.users;
                    range.idle.retain(|&w| users[w as usize] == 0);
                    range.idle.sort_unstable();
                    range.idle.dedup();
                }
            }
        }
        // A live block's bytes carry no pending extent (its allocation took them), so
        // nothing overlaps the new one.
        if let Some(stamp) = stamp
            && stamp > self.settled_until
        {
            range
                .pending
                .insert(offset, (offset + size, wrapper, stamp));
        }
    }

    /// Forgets range `id`, released: its wrappers are destroyed with it.
    pub fn released(&mut self, id: u32) {
        if let Some(slot) = self.ranges.get_mut(id as usize) {
            *slot = None;
        }
    }
}

/// The wrappers that reached the unsettled pending extents a new block overlaps.
enum Previous {
    None,
    /// One wrapper, and the latest stamp of its extents.
    One(u32, u64),
    Several,
}

impl RangeWrappers {
    /// Removes the pending extents overlapping `start..end` (cutting the ones that stick
    /// out) and says which wrappers reached the ones not settled by an ordering issued at
    /// clock `settled_until`.
    fn take_pending(&mut self, start: u64, end: u64, settled_until: u64) -> Previous {
        if self.pending.is_empty() {
            // The common case where no GPU work reached freed bytes: no search.
            return Previous::None;
        }
        let mut found = Previous::None;
        let mut cut = Vec::new();
        for (&at, &(until, wrapper, stamp)) in self.pending.range(..end).rev() {
            if until <= start {
                // Extents never overlap, so none further left reaches `start`.
                break;
            }
            cut.push((at, until, wrapper, stamp));
        }
        for (at, until, wrapper, stamp) in cut {
            self.pending.remove(&at);
            if at < start {
                self.pending.insert(at, (start, wrapper, stamp));
            }
            if until > end {
                self.pending.insert(end, (until, wrapper, stamp));
            }
            if stamp <= settled_until {
                continue;
            }
            found = match found {
                Previous::None => Previous::One(wrapper, stamp),
                Previous::One(w, latest) if w == wrapper => Previous::One(w, latest.max(stamp)),
                _ => Previous::Several,
            };
        }
        found
    }

    /// The wrapper idled last that no live block uses, if any (skipping stale entries).
    #[inline]
    fn take_idle(&mut self) -> Option<u32> {
        while let Some(wrapper) = self.idle.pop() {
            if self.users[wrapper as usize] == 0 {
                return Some(wrapper);
            }
        }
        None
    }

    /// A wrapper no live block uses: the last one idled, or a new one; past
    /// [`MAX_WRAPPERS`] (or if wgpu refuses a new one), one shared round-robin.
    fn unused(&mut self, pages: &mut PagedMemory, id: u32) -> u32 {
        if let Some(wrapper) = self.take_idle() {
            return wrapper;
        }
        if self.buffers.len() < MAX_WRAPPERS
            && let Ok(buffer) = pages.alias_buffer(id)
        {
            self.buffers.push(buffer);
            self.users.push(0);
            return (self.buffers.len() - 1) as u32;
        }
        let wrapper = self.next_shared % self.buffers.len() as u32;
        self.next_shared = self.next_shared.wrapping_add(1);
        wrapper
    }
}
