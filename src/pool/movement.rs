//! Moving blocks between device and host memory: `offload` and `prefetch`.

use std::sync::atomic::Ordering;

use super::block::{BlockParts, TRANSFERRED};
use super::error::{MoveError, ReadWriteError};
use super::pool_shared::{PoolShared, free_to_engine};
use super::residents::HostBlockError;
use super::{Block, Pool, Residency};
use crate::engine::AllocError;
use crate::gpu::scope::catch;
use crate::gpu::transfer::{TransferError, write_region};

impl Pool {
    /// Moves `block` into host memory, keeping its contents, and frees its device memory.
    ///
    /// Work submitted before the call sees the block where it was; work submitted after sees
    /// it in host memory. The block's [`generation`](Block::generation) grows by one, and
    /// `buffer()`/`offset()` change: rebuild bind groups that use it. A block already in host
    /// memory is left alone. On error the block is unchanged.
    pub fn offload(&self, block: &mut Block) -> Result<(), MoveError> {
        self.check_owner(block)?;
        self.shared.check_device()?;
        if block.residency() == Residency::Host {
            return Ok(());
        }
        let busy = self.busy(&[&*block])?;
        let mut state = self.shared.lock_flushed();
        let mut target = match self.shared.host_block(&mut state, block.size()) {
            Ok(target) => target,
            Err(HostBlockError::Tier(error)) => return Err(MoveError::HostTier(error)),
            Err(HostBlockError::Alloc(error)) => return Err(error.into()),
        };
        if let Err(error) = self.dma(block.parts(), &target) {
            free_to_engine(&mut state, target);
            return Err(error);
        }
        target.label = block.parts().label.clone();
        state.add_label(&target);
        drop(busy);
        let old = block.relocate(target);
        drop(state);
        // The copy is submitted; later users of the device memory come after it in the queue.
        self.retire(old);
        Ok(())
    }

    /// Moves `block` back into device memory, keeping its contents, and frees its host memory.
    ///
    /// Fails with [`MoveError::Alloc`] when the device has no room (the cap, or device
    /// out-of-memory after the engine's retry chain); the block then stays in host memory.
    /// Ordering and generations as for [`offload`](Pool::offload).
    pub fn prefetch(&self, block: &mut Block) -> Result<(), MoveError> {
        self.check_owner(block)?;
        self.shared.check_device()?;
        if block.residency() == Residency::Device {
            return Ok(());
        }
        let mut state = self.shared.lock_flushed();
        let mut target =
            self.place_on_device(&mut state, block.size())
                .map_err(|error| match error {
                    AllocError::OutOfMemory(mut oom) => {
                        oom.host_overflow = state
                            .host
                            .as_ref()
                            .map(|h| h.engine.memory_stats().allocated_bytes.all.current);
                        oom.held_for_submission =
                            (state.held_bytes > 0).then_some(state.held_bytes);
                        MoveError::Alloc(AllocError::OutOfMemory(oom))
                    }
                    other => MoveError::Alloc(other),
                })?;
        let bindable = state.host.as_ref().is_some_and(|h| h.bindable);
        let copied = if bindable {
            self.dma(block.parts(), &target)
        } else {
            self.copy_through_cpu(block, &target)
        };
        if let Err(error) = copied {
            free_to_engine(&mut state, *target);
            return Err(error);
        }
        target.label = block.parts().label.clone();
        state.add_label(&target);
        let old = block.relocate(*target);
        drop(state);
        self.retire(old);
        Ok(())
    }

    /// Frees the place a block moved out of, as a dropped block's: held back while
    /// recordings that exposed it are open, kept while references bind it. Called without
    /// the state lock (freeing may take it).
    fn retire(&self, old: BlockParts) {
        if let Some(place) = old.share.get() {
            place.mark_moved();
        }
        PoolShared::release(self.shared.clone(), Box::new(old));
    }

    fn check_owner(&self, block: &Block) -> Result<(), MoveError> {
        if self.owns(block) {
            Ok(())
        } else {
            Err(MoveError::ForeignBlock)
        }
    }

    /// Copies the block's bytes from `from` to `to` with `copy_buffer_to_buffer`.
    fn dma(&self, from: &BlockParts, to: &BlockParts) -> Result<(), MoveError> {
        let bytes = from.size.div_ceil(4) * 4;
        from.gpu_work.fetch_or(TRANSFERRED, Ordering::Relaxed);
        to.gpu_work.fetch_or(TRANSFERRED, Ordering::Relaxed);
        let PoolShared { device, queue, .. } = &*self.shared;
        catch(device, || {
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgpool move"),
            });
            encoder.copy_buffer_to_buffer(&from.buffer, from.offset, &to.buffer, to.offset, bytes);
            queue.submit([encoder.finish()]);
        })
        .map_err(MoveError::Copy)?;
        // A submission that lost the device copied nothing.
        self.shared.check_device()?;
        Ok(())
    }

    /// Copies a host block that no copy can read (no `MAPPABLE_PRIMARY_BUFFERS`) by mapping
    /// it, then writing the bytes to `to`.
    fn copy_through_cpu(&self, block: &Block, to: &BlockParts) -> Result<(), MoveError> {
        to.gpu_work.fetch_or(TRANSFERRED, Ordering::Relaxed);
        let bytes = self
            .read_words(block, 0, block.bound_size())
            .map_err(|error| match error {
                ReadWriteError::MissingUsage { needed, purpose } => {
                    MoveError::Transfer(TransferError::MissingUsage { needed, purpose })
                }
                ReadWriteError::Transfer(error) => MoveError::Transfer(error),
                ReadWriteError::DeviceLost(lost) => MoveError::DeviceLost(lost),
                // `read_words` checks usages and copies, nothing else.
                _ => MoveError::ForeignBlock,
            })?;
        write_region(
            &self.shared.device,
            &self.shared.queue,
            &to.buffer,
            to.offset,
            &bytes,
        )
        .map_err(MoveError::Transfer)?;
        self.shared.check_device()?;
        Ok(())
    }
}
