//! Allocation: the reuse cache, the engine, and host overflow.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::block::BlockParts;
use super::error::ResidencyError;
use super::pool_shared::PoolState;
use super::residents::{HostBlockError, RoomError};
use super::{Block, Pool, Residency};
use crate::config::Overflow;
use crate::engine::{
    AllocError, Allocation, OomCause, OutOfMemory, RoomShortfall, SegmentSource, SourceError,
};
use crate::history::{Action, now_us};

impl Pool {
    /// A block of at least `size` bytes.
    ///
    /// A block dropped just before is handed straight back to the next request of exactly
    /// its size (see the reuse cache); every other request is placed by the policy with all
    /// free memory visible to it. With `overflow:host`, a request the device cannot serve
    /// comes from host memory that kernels bind in place ([`Block::residency`] says which).
    ///
    /// # Errors
    ///
    /// [`AllocError::ZeroSize`] for 0; [`AllocError::TooLarge`] when `size` is larger than
    /// the largest block the pool can serve (its `max` field, [`Pool::max_block_size`]: the
    /// device's `max_buffer_size` in segments mode, its largest address range in pages
    /// mode, rounded down to whole 512 B granules); [`AllocError::OutOfMemory`] when neither the
    /// cache, nor a new segment, nor releasing the whole cache and retrying helps (nor host
    /// memory, with `overflow:host`); [`AllocError::HeldForSubmission`] while more bytes of
    /// dropped blocks wait for a submission point than the pool's held limit allows, under
    /// [`HeldLimitAction::Error`](super::HeldLimitAction::Error). The pool stays usable
    /// after any of them. Once the device is lost (where the pool has its
    /// [`ErrorLog`](crate::gpu::ErrorLog), see
    /// [`PoolOptions::with_error_log`](super::PoolOptions::with_error_log)) every allocation
    /// fails with [`AllocError::Source`] of kind
    /// [`SourceErrorKind::DeviceLost`](crate::engine::SourceErrorKind::DeviceLost).
    #[inline]
    pub fn alloc(&self, size: u64) -> Result<Block, AllocError> {
        if self.shared.over_held_limit.load(Ordering::Acquire) {
            return Err(self.held_limit_error());
        }
        self.shared.check_device()?;
        // While the history records, every request goes through the engine, so that each
        // allocation and free is an event; so it does where `reuse_cache` is off.
        if !self.shared.bypasses_cache()
            && let Some((shared, mut parts)) = self.shared.reuse.take(size)
        {
            parts.exposure.clear();
            return Ok(Block::new(shared, parts));
        }
        self.alloc_through_engine(size, None)
    }

    #[cold]
    fn held_limit_error(&self) -> AllocError {
        AllocError::HeldForSubmission {
            held: self.shared.lock().held_bytes,
            limit: self.shared.held_limit.unwrap_or(0),
        }
    }

    /// A block of at least `size` bytes that carries `label`: [`Block::label`] returns it,
    /// and [`snapshot`](Pool::snapshot), [`memory_summary`](Pool::memory_summary) and
    /// [`leak_report`](Pool::leak_report) name the block by it. Labels cost a lock and a
    /// map entry per block (labelled blocks bypass the reuse cache); use [`alloc`](Pool::alloc)
    /// on hot paths.
    ///
    /// # Errors
    ///
    /// As for [`alloc`](Pool::alloc).
    pub fn alloc_labeled(&self, size: u64, label: &str) -> Result<Block, AllocError> {
        if self.shared.over_held_limit.load(Ordering::Acquire) {
            return Err(self.held_limit_error());
        }
        self.shared.check_device()?;
        self.alloc_through_engine(size, Some(Arc::from(label)))
    }

    fn alloc_through_engine(
        &self,
        size: u64,
        label: Option<Arc<str>>,
    ) -> Result<Block, AllocError> {
        let mut state = self.shared.lock_flushed();
        let placed = match self.place_on_device(&mut state, size) {
            Ok(parts) => parts,
            Err(AllocError::OutOfMemory(mut oom)) => {
                oom.held_for_submission = (state.held_bytes > 0).then_some(state.held_bytes);
                let served = if state.engine.config().overflow == Overflow::Host {
                    self.overflow_to_host(&mut state, size, oom)
                } else {
                    Err(AllocError::OutOfMemory(oom))
                };
                match served {
                    Ok(placed) => placed,
                    Err(error) => {
                        // Served from nowhere: an out-of-memory event in the history.
                        if let Some(log) = &mut state.memory.history {
                            log.oom(size, 0, now_us());
                        }
                        return Err(error);
                    }
                }
            }
            Err(error) => return Err(error),
        };
        let mut placed = placed;
        if label.is_some() {
            placed.label = label;
            state.add_label(&placed);
        }
        // A reference a drained block gave back, where the bank has one: no atomic count.
        let shared = state.references.withdraw(&self.shared);
        drop(state);
        Ok(Block::new(shared, placed))
    }

    /// Places a device block of `size` bytes; in a pool with residency, evicts blocks to
    /// make room when the budget is full, and tracks the new block. Its record comes from
    /// the record shelf where a block of the same segment left one.
    pub(super) fn place_on_device(
        &self,
        state: &mut PoolState,
        size: u64,
    ) -> Result<Box<BlockParts>, AllocError> {
        let PoolState { engine, memory, .. } = &mut *state;
        let allocation = match engine.allocate(size, 0, memory) {
            Ok(allocation) => allocation,
            Err(AllocError::OutOfMemory(oom)) if state.residents.is_some() => {
                self.place_after_evictions(state, size, oom)?
            }
            Err(error) => return Err(error),
        };
        if let Some(log) = &mut state.memory.history {
            log.block(Action::Alloc, &allocation, 0, now_us());
        }
        let (buffer, wrapper, inherited) = state.memory.block_buffer(&allocation);
        // A record from a freed block of the segment is reset in place (it keeps its buffer
        // handle when the new block is in the same buffer); a new one is built in its box:
        // every move of the record by value is a copy on the allocation path.
        let mut parts = match state.shelf.take(allocation.segment) {
            Some(mut record) => {
                let buffer = (record.buffer != *buffer).then(|| buffer.clone());
                record.reset(allocation, buffer, Residency::Device);
                record
            }
            None => Box::new(BlockParts::new(
                allocation,
                buffer.clone(),
                Residency::Device,
            )),
        };
        parts.wrapper = wrapper;
        *parts.inherited_work.get_mut() = inherited;
        if let Some(residents) = &mut state.residents
            && let Some(run) = state.engine.evictable_run(parts.id)
        {
            residents.track(&mut parts, run, self.shared.use_clock.tick());
        }
        Ok(parts)
    }

    /// The request `engine.allocate` refused with `oom` in a pool with residency: evicts
    /// blocks to make room and tries again, up to six times; the one out-of-memory error of
    /// the request if none helps. Out of line: the allocation path above stays small.
    #[cold]
    #[inline(never)]
    fn place_after_evictions(
        &self,
        state: &mut PoolState,
        size: u64,
        mut oom: Box<OutOfMemory>,
    ) -> Result<Allocation, AllocError> {
        let mut failures = 0u32;
        loop {
            failures += 1;
            if failures <= 6 {
                // The request's pages, then twice as many each time: the request may need a
                // segment larger than itself, and a block shares its end pages.
                let page = state.memory.page_mapping().map_or(1, |m| m.page);
                let needed = (oom.rounded.div_ceil(page) * page) << (failures - 1);
                match self.shared.make_room(state, needed, &[]) {
                    Ok(freed) if freed > 0 => {
                        let PoolState { engine, memory, .. } = &mut *state;
                        match engine.allocate(size, 0, memory) {
                            Ok(allocation) => {
                                for _ in 0..failures {
                                    // Eviction served the request: the attempts that
                                    // failed were not out-of-memory.
                                    state.engine.uncount_oom();
                                }
                                return Ok(allocation);
                            }
                            Err(AllocError::OutOfMemory(again)) => {
                                oom = again;
                                continue;
                            }
                            Err(error) => return Err(error),
                        }
                    }
                    Ok(_) => {}
                    Err(RoomError::Short(short)) => oom.residency = Some(short),
                    Err(RoomError::Failed(ResidencyError::HostLimit { limit, .. })) => {
                        oom.residency = Some(RoomShortfall {
                            needed,
                            host_full: Some(limit.unwrap_or(0)),
                            ..RoomShortfall::default()
                        });
                    }
                    Err(RoomError::Failed(error)) => log::warn!(
                        "{}: evicting blocks to make room failed: {error}",
                        self.shared.label
                    ),
                }
            }
            // One out-of-memory for the request, not one per attempt.
            for _ in 1..failures {
                state.engine.uncount_oom();
            }
            return Err(AllocError::OutOfMemory(oom));
        }
    }

    /// Serves a request the device could not from host memory (`overflow:host`). The
    /// device's failure then counts as an overflow, not as an out-of-memory. If host memory
    /// fails too, the device's out-of-memory error comes back, saying how much went to host
    /// memory and why host memory failed.
    fn overflow_to_host(
        &self,
        state: &mut PoolState,
        size: u64,
        mut oom: Box<OutOfMemory>,
    ) -> Result<Box<BlockParts>, AllocError> {
        match self.shared.host_block(state, size) {
            Ok(parts) => {
                record_overflow(state);
                Ok(Box::new(parts))
            }
            Err(HostBlockError::Tier(error)) => {
                oom.cause = OomCause::Device(SourceError::out_of_memory(format!(
                    "{}; host overflow unavailable: {error}",
                    oom.cause
                )));
                Err(AllocError::OutOfMemory(oom))
            }
            Err(HostBlockError::Alloc(AllocError::OutOfMemory(host_oom))) => {
                oom.host_overflow = state
                    .host
                    .as_ref()
                    .map(|h| h.engine.memory_stats().allocated_bytes.all.current);
                oom.cause = OomCause::Device(SourceError::out_of_memory(format!(
                    "host memory refused the overflow too: {}",
                    host_oom.cause
                )));
                Err(AllocError::OutOfMemory(oom))
            }
            Err(HostBlockError::Alloc(error)) => Err(error),
        }
    }
}

/// Counts a request served from host memory as an overflow rather than as the out-of-memory
/// the device's engine recorded for it.
fn record_overflow(state: &mut PoolState) {
    state.host_overflows += 1;
    // The engine counted the failure that led here as an out-of-memory; it was not one.
    state.engine.uncount_oom();
}

impl Pool {
    /// Destroys every cached segment buffer that holds no live block, in device and host
    /// memory; `reserved_bytes` drops by their total size. In pages mode, unmaps every idle
    /// page and frees the device memory behind it. Blocks held back until a submission
    /// point are live: their segments (or pages) stay.
    pub fn empty_cache(&self) {
        let mut state = self.shared.lock_flushed();
        let PoolState {
            engine,
            memory,
            host,
            shelf,
            ..
        } = &mut *state;
        // The shelf's records may name buffers about to be destroyed.
        shelf.clear();
        engine.empty_cache(memory);
        if let Some(host) = host {
            host.engine.empty_cache(&mut host.segments);
        }
    }
}
