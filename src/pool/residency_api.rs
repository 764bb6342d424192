//! Residency through a pool handle: making blocks resident, submitting with a residency set,
//! pinning, evicting by hand, and the figures.
//!
//! See [`PoolOptions::with_residency`](super::PoolOptions::with_residency) for what a pool
//! with residency guarantees.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use super::error::ResidencyError;
use super::pool_shared::PoolShared;
use super::residence::Residence;
use super::{Block, Pool};
use crate::engine::BlockId;

/// What a pool with residency holds where, and what moving blocks cost
/// ([`Pool::residency_stats`]). Byte figures count the whole pages inside tracked blocks:
/// what eviction moves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ResidencyStats {
    /// The device budget the pool keeps mapped memory under.
    pub budget_bytes: u64,
    /// The host limit on evicted, offloaded and overflow blocks together, if any.
    pub host_limit_bytes: Option<u64>,
    /// Live blocks that may be evicted (those with a whole page of their own).
    pub tracked_blocks: u64,
    /// Bytes of tracked blocks on the device.
    pub resident_bytes: u64,
    /// Tracked blocks evicted now.
    pub evicted_blocks: u64,
    /// Bytes of tracked blocks evicted now (their copies in host memory).
    pub evicted_bytes: u64,
    /// Tracked blocks pinned now.
    pub pinned_blocks: u64,
    /// Tracked blocks declared read-only now ([`Pool::set_read_only`]).
    pub read_only_blocks: u64,
    /// Host bytes held by copies kept for read-only blocks on the device: evicting those
    /// again copies nothing. The host limit drops them first when it needs room.
    pub kept_copy_bytes: u64,
    /// Evictions since creation (or the last reset of accumulated statistics).
    pub evictions: u64,
    /// Device bytes those evictions gave back.
    pub evicted_bytes_total: u64,
    /// Bytes those evictions copied to host memory: less than `evicted_bytes_total` by the
    /// evictions of read-only blocks with a kept copy and of discarded blocks.
    pub copied_out_bytes_total: u64,
    /// Restores since creation (or the last reset).
    pub restores: u64,
    /// Device bytes those restores mapped again.
    pub restored_bytes_total: u64,
    /// Bytes those restores copied back: less than `restored_bytes_total` by the restores
    /// of discarded blocks.
    pub copied_in_bytes_total: u64,
    /// CPU time spent evicting and restoring: allocating host copies, submitting copies,
    /// binding pages (the copies run on the GPU, overlapping other work).
    #[serde(serialize_with = "seconds")]
    pub move_time: Duration,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Keeps blocks from eviction while the pool's own work uses them (see [`Residence`]).
pub(super) struct Busy<'a> {
    residences: Vec<&'a Arc<Residence>>,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        for residence in &self.residences {
            residence.busy.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Pool {
    /// The residency figures, or `None` for a pool without residency.
    pub fn residency_stats(&self) -> Option<ResidencyStats> {
        self.shared.lock().residents.as_ref().map(|r| r.stats())
    }

    /// Brings every block of `blocks` that is evicted back to the device (evicting others,
    /// never one of `blocks`, least recently used first) and notes them as used now. The
    /// copies are submitted, not waited for: call it for the next step's blocks while the
    /// current step runs, to prefetch them.
    ///
    /// # Errors
    ///
    /// [`ResidencyError::ForeignBlock`] for a block of another pool, and the errors of a
    /// restore ([`ResidencyError::NoRoom`] when the budget cannot hold them all). Blocks
    /// restored before the error stay restored; nothing is lost. [`ResidencyError::DeviceLost`]
    /// once the device is lost (where the pool has its [`ErrorLog`](crate::gpu::ErrorLog)).
    pub fn make_resident(&self, blocks: &[&Block]) -> Result<(), ResidencyError> {
        self.shared.check_device()?;
        let busy = self.busy(blocks)?;
        drop(busy);
        self.shared.check_device()?;
        Ok(())
    }

    /// [`make_resident`](Pool::make_resident) for `blocks`, then submits `command_buffers`
    /// and reaches a submission point, as [`submit`](Pool::submit) does. No block of `blocks`
    /// can be evicted between the two. List every block the commands use whose binding was
    /// taken before this step (a wgpu bind group kept from earlier); blocks bound during this
    /// recording, and [`PoolBindGroup`](super::PoolBindGroup)s recorded now, were made
    /// resident when they were bound.
    ///
    /// # Errors
    ///
    /// As for [`make_resident`](Pool::make_resident); nothing is submitted then, except that
    /// [`ResidencyError::DeviceLost`] also comes when the submission itself lost the device
    /// (its work did not run).
    pub fn submit_using<I>(
        &self,
        blocks: &[&Block],
        command_buffers: I,
    ) -> Result<wgpu::SubmissionIndex, ResidencyError>
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
    {
        self.shared.check_device()?;
        let busy = self.busy(blocks)?;
        let index = self.submit(command_buffers);
        drop(busy);
        self.shared.check_device()?;
        Ok(index)
    }

    /// Pins `block` on the device: it is made resident now and not evicted until as many
    /// [`unpin`](Pool::unpin) calls as `pin` calls.
    ///
    /// # Errors
    ///
    /// [`ResidencyError::Disabled`] without residency, [`ResidencyError::NotTracked`] for a
    /// block smaller than a page (it is never evicted anyway), and the errors of
    /// [`make_resident`](Pool::make_resident) (the pin is then not taken).
    pub fn pin(&self, block: &Block) -> Result<(), ResidencyError> {
        let residence = self.residence_of(block)?;
        residence.pins.fetch_add(1, Ordering::SeqCst);
        if residence.evicting() {
            let mut state = self.shared.lock();
            if let Err(error) = self.shared.restore_tracked(&mut state, block.id(), &[]) {
                residence.pins.fetch_sub(1, Ordering::SeqCst);
                return Err(error);
            }
        }
        residence.touch(self.shared.use_clock.tick());
        Ok(())
    }

    /// Takes back one [`pin`](Pool::pin) of `block`; a block with no pin left may be
    /// evicted again. Unpinning a block that holds no pin does nothing.
    ///
    /// # Errors
    ///
    /// As for [`pin`](Pool::pin), apart from the restore.
    pub fn unpin(&self, block: &Block) -> Result<(), ResidencyError> {
        let residence = self.residence_of(block)?;
        let _ = residence
            .pins
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| p.checked_sub(1));
        Ok(())
    }

    /// Declares `block` read-only (`true`) or writable again (`false`). A read-only block
    /// keeps the host copy it is restored from, so evicting it again unmaps its pages and
    /// copies nothing: for weights and other inputs that are written once and read many
    /// times, a stream over more than the device budget then moves each block in once per
    /// use instead of in and out. The kept copies count against the host limit; when it
    /// needs room they are dropped, most recently used block first.
    ///
    /// Guarantees: [`Pool::write`] refuses a read-only block with
    /// [`ResidencyError::ReadOnly`]. The pool cannot see what GPU work does with a binding:
    /// **a read-only block must not be written by commands** (shaders, copies, clears)
    /// until the declaration is taken back, or the write may be lost at its next eviction,
    /// which then restores the bytes it was last restored from. Taking the declaration back
    /// drops the kept copy.
    ///
    /// # Errors
    ///
    /// As for [`pin`](Pool::pin), apart from the restore: [`ResidencyError::ForeignBlock`],
    /// [`ResidencyError::Disabled`], [`ResidencyError::NotTracked`].
    pub fn set_read_only(&self, block: &Block, read_only: bool) -> Result<(), ResidencyError> {
        let residence = self.residence_of(block)?;
        let mut state = self.shared.lock();
        self.shared
            .set_read_only(&mut state, residence.id, read_only);
        Ok(())
    }

    /// Whether `block` is declared read-only ([`set_read_only`](Pool::set_read_only)).
    pub fn is_read_only(&self, block: &Block) -> bool {
        self.owns(block) && block.is_read_only()
    }

    /// Declares that `block`'s contents are not needed before its next use: the next step
    /// overwrites every byte it reads later. An evicted block then comes back without a
    /// copy (its bytes are undefined until written) and its host copy is freed now; a block
    /// on the device is evicted, if it is before its next use, without copying anything
    /// out. Any use (a binding, an operand, [`make_resident`](Pool::make_resident),
    /// [`Pool::read`], [`Pool::write`]) ends the declaration. This is D3D12's
    /// `DiscardResource` for a pool block: a stream that writes whole blocks declares it
    /// for its outputs, which then never move in.
    ///
    /// # Errors
    ///
    /// As for [`set_read_only`](Pool::set_read_only).
    pub fn discard(&self, block: &Block) -> Result<(), ResidencyError> {
        let residence = self.residence_of(block)?;
        let mut state = self.shared.lock();
        self.shared.discard(&mut state, residence.id);
        Ok(())
    }

    /// Whether `block` is on the device: `false` only for an evicted block of a pool with
    /// residency.
    pub fn is_resident(&self, block: &Block) -> bool {
        match &block.parts().residence {
            Some(residence) if self.owns(block) => {
                // Under the lock no eviction is deciding: the flag is exact.
                let _state = self.shared.lock();
                !residence.evicting()
            }
            _ => true,
        }
    }

    /// Evicts `block` now: copies its whole pages to host memory and unmaps them, keeping
    /// its buffer and offset; its next use brings it back. Returns the device bytes given
    /// back (0 for a block evicted already).
    ///
    /// # Errors
    ///
    /// [`ResidencyError::InUse`] for a pinned block or one that recorded commands not yet
    /// submitted may use; [`ResidencyError::HostLimit`] when host memory is full; and as for
    /// [`pin`](Pool::pin). The block is then unchanged.
    pub fn evict(&self, block: &Block) -> Result<u64, ResidencyError> {
        let residence = self.residence_of(block)?;
        let mut state = self.shared.lock();
        if residence.evicting() {
            return Ok(0);
        }
        let bytes = self.shared.evict_tracked(&mut state, block.id())?;
        if bytes == 0 && !residence.evicting() {
            return Err(ResidencyError::InUse);
        }
        Ok(bytes)
    }

    /// The residence of a block of this pool.
    fn residence_of<'a>(&self, block: &'a Block) -> Result<&'a Arc<Residence>, ResidencyError> {
        if !self.owns(block) {
            return Err(ResidencyError::ForeignBlock);
        }
        if self.shared.lock().residents.is_none() {
            return Err(ResidencyError::Disabled);
        }
        block
            .parts()
            .residence
            .as_ref()
            .ok_or(ResidencyError::NotTracked)
    }

    /// Marks `blocks` busy and makes them resident; they stay on the device until the guard
    /// drops.
    pub(super) fn busy<'a>(&self, blocks: &[&'a Block]) -> Result<Busy<'a>, ResidencyError> {
        if blocks.iter().any(|b| !self.owns(b)) {
            return Err(ResidencyError::ForeignBlock);
        }
        let busy = Busy {
            residences: blocks
                .iter()
                .filter_map(|b| b.parts().residence.as_ref())
                .collect(),
        };
        for residence in &busy.residences {
            residence.busy.fetch_add(1, Ordering::SeqCst);
        }
        if busy.residences.iter().any(|r| r.evicting()) {
            let keep: Vec<BlockId> = busy.residences.iter().map(|r| r.id).collect();
            let mut state = self.shared.lock();
            for residence in &busy.residences {
                self.shared
                    .restore_tracked(&mut state, residence.id, &keep)?;
            }
        }
        let now = self.shared.use_clock.tick();
        for residence in &busy.residences {
            residence.touch(now);
            residence.clear_discard();
        }
        Ok(busy)
    }
}

impl PoolShared {
    /// Notes a use of a tracked block whose use was just published (a ticket in its
    /// exposure), and brings it back if it is evicted.
    #[inline]
    pub(crate) fn use_tracked(&self, residence: &Residence) -> Result<(), ResidencyError> {
        residence.touch(self.use_clock.tick());
        let restored = if residence.evicting() {
            self.restore_for_use(residence.id)
        } else {
            Ok(())
        };
        residence.clear_discard();
        restored
    }

    #[cold]
    pub(crate) fn restore_for_use(&self, id: BlockId) -> Result<(), ResidencyError> {
        let mut state = self.lock();
        self.restore_tracked(&mut state, id, &[]).map(|_| ())
    }
}
