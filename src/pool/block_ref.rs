//! [`BlockRef`]: a reference that keeps a block's memory from serving another request while
//! it lives, as a wgpu bind group keeps its buffers alive.
//!
//! A bind group names memory, not a [`Block`] handle: it can be recorded again long after
//! the block that it was built from is dropped. [`PoolBindGroup`](super::PoolBindGroup) and
//! `kernels::PreparedKernel` therefore hold a `BlockRef` for each
//! block they bind. The memory returns to the pool only when the block is dropped **and**
//! every reference to it is gone, and then under the usual rule for recorded commands
//! (see [`FreeTiming`](super::FreeTiming)): recordings that used a reference count as
//! recordings that exposed the block.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::block::BlockParts;
use super::pool_shared::PoolShared;
use super::recordings::ExposureSpan;
use super::residence::Residence;
use super::{Block, Residency};

/// A reference to the memory of a [`Block`]: while one exists, that memory serves no other
/// block, even after the block is dropped or moved elsewhere by
/// [`Pool::offload`](super::Pool::offload) or [`Pool::prefetch`](super::Pool::prefetch).
///
/// Cheap to clone. Take one with [`Block::reference`] when you build your own bind group from
/// [`Block::binding`] and keep it beside the bind group, calling [`mark_used`](Self::mark_used)
/// whenever you record the group; [`PoolBindGroup`](super::PoolBindGroup) does both for you.
#[derive(Clone)]
pub struct BlockRef {
    place: Arc<SharedPlace>,
}

/// A block's place shared between its handle and its references.
pub(crate) struct SharedPlace {
    pool: Arc<PoolShared>,
    /// What the place holds once the handle let go of it (dropped, or moved the block away).
    parts: Mutex<Option<Box<BlockParts>>>,
    /// The recordings that used a reference.
    exposure: ExposureSpan,
    /// The bytes of the place, for the pool's count of memory kept by references.
    capacity: u64,
    residency: Residency,
    /// The block's record in a pool with residency, if it may be evicted.
    residence: Option<Arc<Residence>>,
    /// The block's generation at this place.
    generation: u32,
    /// Set when the block moved away (offload, prefetch): references name memory that no
    /// longer holds it.
    moved: AtomicBool,
}

impl Block {
    /// A reference that keeps this block's memory from reuse while it lives (see
    /// [`BlockRef`]). The first call per block allocates a small shared record; later calls
    /// only count a reference.
    pub fn reference(&self) -> BlockRef {
        let parts = self.parts();
        let place = parts.share.get_or_init(|| {
            Arc::new(SharedPlace {
                pool: self.shared().clone(),
                parts: Mutex::new(None),
                exposure: ExposureSpan::default(),
                capacity: parts.capacity,
                residency: parts.residency,
                residence: parts.residence.clone(),
                generation: parts.generation,
                moved: AtomicBool::new(false),
            })
        });
        BlockRef {
            place: place.clone(),
        }
    }
}

impl BlockRef {
    /// Notes that the calling thread is recording commands that use the referenced memory
    /// (a bind group that binds it): once the block is dropped, its memory waits for this
    /// thread's next submission point, as for a block whose binding was taken.
    ///
    /// In a pool with residency, an evicted block is brought back first (the bind group
    /// stays valid: the block keeps its address); where that fails, the failure is logged.
    #[inline]
    pub fn mark_used(&self) {
        let place = &*self.place;
        if place.pool.holds_for_recordings() {
            let ticket = place.pool.submissions.recordings.thread_ticket();
            place.exposure.include(ticket);
            if let Some(residence) = &place.residence {
                // Published before the eviction flag is read (see `residence`).
                residence.tickets.include(ticket);
                if let Err(error) = place.pool.use_tracked(residence) {
                    log::error!("{}: {error}", place.pool.label);
                }
            }
        }
    }

    /// Whether the block moved away from the referenced memory since the reference was taken
    /// ([`Pool::offload`](super::Pool::offload), [`Pool::prefetch`](super::Pool::prefetch)):
    /// the memory is still kept from reuse, but it no longer holds the block, so a bind
    /// group built before the move reads and writes a copy nobody else sees. Eviction by a
    /// pool with residency never makes a reference stale: the block keeps its place.
    pub fn is_stale(&self) -> bool {
        self.place.moved.load(Ordering::Acquire)
    }

    /// The [`generation`](Block::generation) of the block at the referenced memory.
    pub fn generation(&self) -> u32 {
        self.place.generation
    }

    /// Whether the referenced memory belongs to a pool on `device`.
    pub fn is_on(&self, device: &wgpu::Device) -> bool {
        self.place.pool.submissions.key.matches(device)
    }

    /// The bytes the referenced block spans.
    pub fn capacity(&self) -> u64 {
        self.place.capacity
    }
}

impl std::fmt::Debug for BlockRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockRef")
            .field("capacity", &self.place.capacity)
            .field("residency", &self.place.residency)
            .finish()
    }
}

impl SharedPlace {
    /// Notes that the block moved away from this place (see [`BlockRef::is_stale`]).
    pub fn mark_moved(&self) {
        self.moved.store(true, Ordering::Release);
    }

    /// Takes the parts of the place from the block's handle, which lets go of it; the last
    /// reference to drop frees them.
    pub fn adopt(&self, parts: Box<BlockParts>) {
        self.pool
            .referenced_bytes
            .fetch_add(self.capacity, Ordering::AcqRel);
        *self.parts.lock().unwrap_or_else(|e| e.into_inner()) = Some(parts);
    }
}

impl Drop for SharedPlace {
    fn drop(&mut self) {
        let parts = self
            .parts
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // Every reference is gone; the handle let go of the place before its own reference
        // dropped, so the parts are here.
        if let Some(parts) = parts {
            self.pool
                .referenced_bytes
                .fetch_sub(self.capacity, Ordering::AcqRel);
            parts.exposure.merge(&self.exposure);
            PoolShared::release(self.pool.clone(), parts);
        }
    }
}
