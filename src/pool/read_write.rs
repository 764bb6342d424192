//! `Pool::write` and `Pool::read`: simple, blocking transfers of one block (the staging pool
//! is the fast path).

use super::error::{ReadWriteError, ResidencyError};
use super::{Block, Pool};
use crate::gpu::scope::catch;
use crate::gpu::transfer::{TransferError, map_read_into, read_region, write_region};

impl Pool {
    /// Copies `data` into the start of `block`, in queue order: work submitted after this
    /// call sees the data.
    ///
    /// `data` may be shorter than the block; it may not be longer. Guarantee: no byte of the
    /// block beyond `data.len()` changes, except that a write of the whole block
    /// (`data.len() == block.size()`) zeroes the up to 3 padding bytes between `size()` and
    /// `bound_size()`. A shorter write whose length is not a multiple of 4 reads the last
    /// word back first (one round trip), because the GPU copies whole words.
    ///
    /// # Errors
    ///
    /// [`ReadWriteError::ForeignBlock`] for a block of another pool,
    /// [`ReadWriteError::BeyondBlock`] for more bytes than the block's `size()`,
    /// [`ReadWriteError::MissingUsage`] when the pool lacks `COPY_DST` (or `COPY_SRC`, which
    /// a short write of a length not a multiple of 4 needs), and
    /// [`ReadWriteError::Transfer`] when wgpu refuses the copy, and in a pool with residency
    /// [`ReadWriteError::Residency`] when an evicted block cannot be brought back or the
    /// block is declared read-only ([`ResidencyError::ReadOnly`]). [`ReadWriteError::DeviceLost`]
    /// when the device was lost before the write or by the submission that carried it
    /// (where the pool has the device's [`ErrorLog`](crate::gpu::ErrorLog)).
    pub fn write(&self, block: &Block, data: &[u8]) -> Result<(), ReadWriteError> {
        if !self.owns(block) {
            return Err(ReadWriteError::ForeignBlock);
        }
        self.shared.check_device()?;
        let len = data.len() as u64;
        if len > block.size() {
            return Err(ReadWriteError::BeyondBlock {
                len,
                size: block.size(),
            });
        }
        if self.is_read_only(block) {
            return Err(ResidencyError::ReadOnly.into());
        }
        let _busy = self.busy(&[block])?;
        let (buffer, offset) = block.place();
        if !buffer.usage().contains(wgpu::BufferUsages::COPY_DST) {
            return Err(ReadWriteError::MissingUsage {
                needed: "COPY_DST",
                purpose: "Pool::write",
            });
        }
        let whole = data.len() / 4 * 4;
        let (head, tail) = data.split_at(whole);
        let (device, queue) = (&self.shared.device, &self.shared.queue);
        write_region(device, queue, buffer, offset, head)?;
        // wgpu drops the work of a lost device without an error: the loss record says it.
        self.shared.check_device()?;
        if tail.is_empty() {
            return Ok(());
        }
        // The last word is the block's own: its capacity is a multiple of 512 B.
        let at = offset + whole as u64;
        let mut word = if len == block.size() {
            [0u8; 4]
        } else {
            let current = self
                .read_words(block, whole as u64, 4)
                .map_err(|error| match error {
                    ReadWriteError::MissingUsage { needed, .. } => ReadWriteError::MissingUsage {
                        needed,
                        purpose: "a write shorter than the block whose length is not a \
                                  multiple of 4 bytes (the bytes after it are read back to be \
                                  kept)",
                    },
                    other => other,
                })?;
            let mut word = [0u8; 4];
            word.copy_from_slice(&current[..4]);
            word
        };
        word[..tail.len()].copy_from_slice(tail);
        write_region(device, queue, buffer, at, &word)?;
        self.shared.check_device()?;
        Ok(())
    }

    /// The block's `size()` bytes, after all work submitted so far. Blocks until the data
    /// is on the host.
    ///
    /// # Errors
    ///
    /// [`ReadWriteError::ForeignBlock`] for a block of another pool,
    /// [`ReadWriteError::MissingUsage`] when the pool's buffers lack `COPY_SRC` (a uniform
    /// pool, say), [`ReadWriteError::Transfer`] when wgpu refuses the copy or the map,
    /// [`ReadWriteError::Residency`] as for [`write`](Pool::write), and
    /// [`ReadWriteError::DeviceLost`] when the device was lost before the data reached the
    /// host: no bytes of a lost device are returned.
    pub fn read(&self, block: &Block) -> Result<Vec<u8>, ReadWriteError> {
        if !self.owns(block) {
            return Err(ReadWriteError::ForeignBlock);
        }
        self.shared.check_device()?;
        let _busy = self.busy(&[block])?;
        let read = self.read_words(block, 0, block.bound_size());
        // A map that failed because the device was lost says so; data read while it was
        // being lost is not returned.
        self.shared.check_device()?;
        let mut data = read?;
        data.truncate(block.size() as usize);
        Ok(data)
    }

    /// `len` bytes of the block from `start` (both multiples of 4, inside the block), after
    /// all work submitted so far.
    pub(super) fn read_words(
        &self,
        block: &Block,
        start: u64,
        len: u64,
    ) -> Result<Vec<u8>, ReadWriteError> {
        let (buffer, offset) = block.place();
        let range = offset + start..offset + start + len;
        let usage = buffer.usage();
        if usage.contains(wgpu::BufferUsages::MAP_READ)
            && !usage.contains(wgpu::BufferUsages::COPY_SRC)
        {
            // A host block on a device without MAPPABLE_PRIMARY_BUFFERS: its buffer is its
            // own and mappable. Maps start at multiples of 8 bytes.
            let skip = range.start % wgpu::MAP_ALIGNMENT;
            let mut data = Vec::with_capacity((skip + len) as usize);
            let device = &self.shared.device;
            let mapped = range.start - skip..range.end;
            catch(device, || map_read_into(device, buffer, mapped, &mut data))
                .map_err(TransferError::from)??;
            data.drain(..skip as usize);
            return Ok(data);
        }
        if !usage.contains(wgpu::BufferUsages::COPY_SRC) {
            return Err(ReadWriteError::MissingUsage {
                needed: "COPY_SRC",
                purpose: "Pool::read",
            });
        }
        Ok(read_region(
            &self.shared.device,
            &self.shared.queue,
            buffer,
            range.start,
            len,
        )?)
    }
}
