//! Binds queued to reach the driver together: many maps and unmaps, one `vkQueueBindSparse`.
//!
//! A workload that maps a little at a time (a KV cache growing by a token) makes a bind call
//! per map, and one per unmap where it recycles pages. Where binds are ordered on the GPU
//! (timeline semaphores), neither needs to reach the driver at once: a map only before the
//! GPU work that uses it is submitted, an unmap only before its memory is freed or its range
//! destroyed (a later map of the same memory is queued after it, so it is bound after it). So
//! pools queue their binds on the device ([`SparseDevice::queue_binds`]) and the queue goes to
//! the driver in one call when it holds a pool's `bind_batch` maps and unmaps, before the CPU
//! waits for binds (a range's buffer or a chunk given back), and before every submission wgpu
//! makes on the device: wgpu's `vkQueueSubmit` goes through the queue's gate (the `gate`
//! module), which submits the queue first. Work that uses a queued map waits for its bind on
//! the GPU, as for any map; a queued unmap waits, on the GPU, for the work submitted before
//! it, as any unmap does. (On an H100, queueing maps alone took a decode's first run from 265
//! calls to 148 and about 10% less time, the unmaps between its maps sending the queue each
//! time; queueing the unmaps too took it to 18 calls, and four traces' first runs from 126-294
//! calls to 15-28: docs/BENCHMARKS.md, calls 32, 33, 55 and 56.)
//!
//! The queue is a list of batches (`VkBindSparseInfo`s of one call, each applied after the
//! one before it: each waits for the bind timeline value the one before signals). A bind
//! joins the last batch unless it touches pages of a buffer that the batch already binds or
//! unbinds: then it starts a new batch, so that no batch binds the same pages of a buffer
//! twice and nothing relies on an order among the binds of one batch. An unmap's batch also
//! waits for the GPU timeline value the unmap waits for (the largest of its unmaps').
//!
//! No wgpu submission waits for a queued bind that is not submitted first (the gate), and the
//! GPU timeline values that queued unmaps wait for were all submitted before the unmaps were
//! queued, so a call of the queue never waits for anything that waits for it.

use ash::vk;

use super::device::SparseDevice;
use super::error::SparseError;

/// The binds into each buffer that one call carries (or one batch of it).
pub(crate) type BufferBinds = Vec<(vk::Buffer, Vec<vk::SparseMemoryBind>)>;

/// One batch of the queue: binds per buffer, in the order they were queued, and the GPU
/// timeline value it waits for (its unmaps').
#[derive(Debug, Default)]
struct QueuedBatch {
    buffers: BufferBinds,
    after_gpu: Option<u64>,
}

impl QueuedBatch {
    /// Whether any bind of `entries` touches bytes of its buffer that a bind of this batch
    /// touches.
    fn overlaps(&self, entries: &[(vk::Buffer, Vec<vk::SparseMemoryBind>)]) -> bool {
        entries.iter().any(|(buffer, binds)| {
            self.buffers
                .iter()
                .filter(|(queued, _)| queued == buffer)
                .any(|(_, queued)| {
                    binds.iter().any(|bind| {
                        queued.iter().any(|q| {
                            bind.resource_offset < q.resource_offset + q.size
                                && q.resource_offset < bind.resource_offset + bind.size
                        })
                    })
                })
        })
    }
}

/// Binds waiting for one `vkQueueBindSparse`: batches in the order they apply.
#[derive(Debug, Default)]
pub(crate) struct QueuedBinds {
    batches: Vec<QueuedBatch>,
    /// Maps and unmaps queued (each one [`push`](Self::push)).
    binds: usize,
}

impl QueuedBinds {
    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Maps and unmaps queued.
    pub fn binds(&self) -> usize {
        self.binds
    }

    /// Batches the queue's call will carry: each signals the next bind timeline value.
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    /// Queues the binds of one map or unmap (`entries`: binds into each buffer), after GPU
    /// timeline value `after_gpu` where given (an unmap). Returns the position of the batch
    /// it joined, from 1: the call signals the bind timeline's last value plus that once the
    /// binds are applied.
    pub fn push(&mut self, entries: BufferBinds, after_gpu: Option<u64>) -> usize {
        if self
            .batches
            .last()
            .is_none_or(|last| last.overlaps(&entries))
        {
            self.batches.push(QueuedBatch::default());
        }
        let last = self.batches.last_mut().expect("one was pushed");
        last.after_gpu = last.after_gpu.max(after_gpu);
        for (buffer, binds) in entries {
            match last
                .buffers
                .iter_mut()
                .find(|(queued, _)| *queued == buffer)
            {
                Some((_, queued)) => queued.extend(binds),
                None => last.buffers.push((buffer, binds)),
            }
        }
        self.binds += 1;
        self.batches.len()
    }

    /// Drops every bind into `buffers` and every bind of `memories` into any buffer (the
    /// ranges and chunks of a memory that goes away while its binds could not be submitted:
    /// they must never reach the driver once freed; unbinds into its released ranges,
    /// whose buffers are kept until the binds before them are applied, stay). Batches left
    /// empty stay: each still signals its bind timeline value, which other binds' values
    /// and released ranges count on.
    pub fn forget(&mut self, buffers: &[vk::Buffer], memories: &[vk::DeviceMemory]) {
        for batch in &mut self.batches {
            batch.buffers.retain_mut(|(buffer, binds)| {
                binds.retain(|bind| !memories.contains(&bind.memory));
                !buffers.contains(buffer) && !binds.is_empty()
            });
        }
    }

    /// Page binds (one per run of pages: `VkSparseMemoryBind`s) in the queue.
    pub fn page_binds(&self) -> usize {
        self.batches
            .iter()
            .flat_map(|batch| &batch.buffers)
            .map(|(_, binds)| binds.len())
            .sum()
    }

    /// The queue as batches of a call: the bind infos of each (one per buffer) and the GPU
    /// timeline value it waits for.
    pub fn infos(&self) -> Vec<(Vec<vk::SparseBufferMemoryBindInfo<'_>>, Option<u64>)> {
        self.batches
            .iter()
            .map(|batch| {
                let infos = batch
                    .buffers
                    .iter()
                    .map(|(buffer, binds)| {
                        vk::SparseBufferMemoryBindInfo::default()
                            .buffer(*buffer)
                            .binds(binds)
                    })
                    .collect();
                (infos, batch.after_gpu)
            })
            .collect()
    }
}

impl SparseDevice {
    /// Queues the binds of one map or unmap (`entries`: binds into each buffer; an unmap
    /// waits for GPU timeline value `after_gpu`) for a later `vkQueueBindSparse` shared with
    /// other binds. Returns the bind timeline value that call signals once these binds are
    /// applied (wgpu work that uses a map must wait for it:
    /// [`Timelines::gpu_waits_for_bind`](super::timeline::Timelines::gpu_waits_for_bind)),
    /// and the calls made here: the queue is submitted once it holds `batch` maps and unmaps.
    /// Needs timelines.
    ///
    /// Once queued, the binds are submitted by a later call: a failure of the submission here
    /// is left to that call (the next wgpu submission on the device, the next bind that
    /// fills the queue, or the next wait for binds reports it).
    pub(crate) fn queue_binds(
        &self,
        entries: BufferBinds,
        after_gpu: Option<u64>,
        batch: usize,
    ) -> (u64, u64) {
        let timelines = self.timelines();
        {
            // Most binds only join the queue: no need to hold the queue's gate for that.
            let mut line = timelines.line();
            if line.queued.binds() + 1 < batch {
                let position = line.queued.push(entries, after_gpu);
                return (line.last + position as u64, 0);
            }
        }
        let _held = self.inner.gate.hold();
        let mut line = timelines.line();
        let position = line.queued.push(entries, after_gpu);
        let value = line.last + position as u64;
        let calls = line.queued.binds() >= batch && self.submit_queued_held(&mut line).is_ok();
        (value, u64::from(calls))
    }

    /// Submits the queued binds now, if any; returns whether there were.
    ///
    /// # Errors
    ///
    /// The driver's error; the binds stay queued.
    pub(crate) fn submit_queued(&self) -> Result<bool, SparseError> {
        self.submit_queued_holding(false)
    }

    /// Submits the queued binds before wgpu submits on `queue_gate`'s queue, whose gate the
    /// caller holds (the gate of the bind queue too where both are one); counted in
    /// [`bind_calls_at_submit`](Self::bind_calls_at_submit).
    pub(crate) fn submit_queued_for(
        &self,
        queue_gate: &std::sync::Arc<super::gate::QueueGate>,
    ) -> Result<bool, SparseError> {
        let submitted =
            self.submit_queued_holding(std::sync::Arc::ptr_eq(queue_gate, &self.inner.gate))?;
        if submitted {
            self.count_submit_flush();
        }
        Ok(submitted)
    }

    /// Submits the queued binds, if any, taking the bind queue's gate unless the caller
    /// holds it (`gate_held`).
    fn submit_queued_holding(&self, gate_held: bool) -> Result<bool, SparseError> {
        let Some(timelines) = &self.inner.timelines else {
            return Ok(false);
        };
        if timelines.line().queued.is_empty() {
            return Ok(false);
        }
        let _held = (!gate_held).then(|| self.inner.gate.hold());
        self.submit_queued_held(&mut timelines.line())
    }
}

#[cfg(test)]
mod tests {
    use ash::vk::Handle;

    use super::*;

    fn bind(offset: u64, size: u64) -> vk::SparseMemoryBind {
        vk::SparseMemoryBind::default()
            .resource_offset(offset)
            .size(size)
    }

    /// Binds queue per buffer, in order, in the last batch; the binds are counted; only bytes
    /// of the same buffer that a bind of the batch touches overlap (touching ends do not).
    #[test]
    fn the_queue_keeps_binds_per_buffer_and_finds_overlaps() {
        let (a, b) = (vk::Buffer::from_raw(1), vk::Buffer::from_raw(2));
        let mut queue = QueuedBinds::default();
        assert!(queue.is_empty());
        assert_eq!(
            queue.push(
                vec![(a, vec![bind(0, 4096)]), (b, vec![bind(8192, 4096)])],
                None
            ),
            1
        );
        assert_eq!(queue.push(vec![(a, vec![bind(16384, 8192)])], None), 1);
        assert_eq!(queue.binds(), 2);
        assert_eq!(queue.batches(), 1);
        let infos = queue.infos();
        assert_eq!(infos.len(), 1, "one batch");
        let (batch, after_gpu) = &infos[0];
        assert_eq!(*after_gpu, None);
        assert_eq!(batch.len(), 2, "one info per buffer");
        assert_eq!(batch[0].buffer, a);
        assert_eq!(batch[0].bind_count, 2);
        assert_eq!(batch[1].buffer, b);
        assert_eq!(batch[1].bind_count, 1);
        drop(infos);
        let last = queue.batches.last().unwrap();
        for (entries, overlaps) in [
            (vec![(a, vec![bind(4096, 12288)])], false),
            (vec![(a, vec![bind(4095, 1)])], true),
            (vec![(a, vec![bind(24575, 4096)])], true),
            (vec![(b, vec![bind(0, 8192)])], false),
            (vec![(b, vec![bind(0, 8193)])], true),
            (
                vec![(vk::Buffer::from_raw(3), vec![bind(0, 1 << 20)])],
                false,
            ),
            (
                vec![(b, vec![bind(0, 4096)]), (a, vec![bind(20480, 4096)])],
                true,
            ),
        ] {
            assert_eq!(last.overlaps(&entries), overlaps, "{entries:?}");
        }
    }

    /// A bind that touches pages the last batch touches starts a new batch (so no batch binds
    /// a page twice); a bind that does not joins the last batch, whatever came before it; an
    /// unmap's wait for the GPU goes to the batch it joins, the largest wait kept.
    #[test]
    fn overlapping_binds_start_a_new_batch_and_unmaps_carry_their_wait() {
        let a = vk::Buffer::from_raw(1);
        let mut queue = QueuedBinds::default();
        // Map, then unmap the same pages (a recycled block): two batches.
        assert_eq!(queue.push(vec![(a, vec![bind(0, 65536)])], None), 1);
        assert_eq!(queue.push(vec![(a, vec![bind(0, 65536)])], Some(3)), 2);
        // Elsewhere: joins the unmap's batch; a later unmap raises its wait, an earlier
        // value does not lower it.
        assert_eq!(queue.push(vec![(a, vec![bind(65536, 65536)])], None), 2);
        assert_eq!(
            queue.push(vec![(a, vec![bind(1 << 20, 65536)])], Some(5)),
            2
        );
        assert_eq!(
            queue.push(vec![(a, vec![bind(2 << 20, 65536)])], Some(4)),
            2
        );
        // The map of the first pages again: a third batch, with no wait of its own.
        assert_eq!(queue.push(vec![(a, vec![bind(0, 4096)])], None), 3);
        assert_eq!(queue.binds(), 6);
        assert_eq!(queue.batches(), 3);
        let waits: Vec<Option<u64>> = queue.infos().iter().map(|(_, wait)| *wait).collect();
        assert_eq!(waits, vec![None, Some(5), None]);
        let counts: Vec<u32> = queue
            .infos()
            .iter()
            .map(|(infos, _)| infos.iter().map(|info| info.bind_count).sum())
            .collect();
        assert_eq!(counts, vec![1, 4, 1]);
    }

    /// Forgetting a buffer's binds leaves the other buffers' binds where they were and every
    /// batch in place (each still signals its value), the emptied ones included.
    #[test]
    fn forgetting_a_buffer_keeps_every_batch_and_the_other_binds() {
        let (a, b) = (vk::Buffer::from_raw(1), vk::Buffer::from_raw(2));
        let mut queue = QueuedBinds::default();
        queue.push(
            vec![(a, vec![bind(0, 4096)]), (b, vec![bind(0, 4096)])],
            None,
        );
        queue.push(vec![(a, vec![bind(0, 4096)])], Some(2));
        queue.push(
            vec![
                (a, vec![bind(0, 4096)]),
                (b, vec![bind(0, 4096), bind(8192, 4096)]),
            ],
            None,
        );
        assert_eq!(queue.batches(), 3);
        assert_eq!(queue.page_binds(), 6);
        // Into a third buffer: a bind of a forgotten memory (a map), and an unbind.
        let (c, memory) = (vk::Buffer::from_raw(3), vk::DeviceMemory::from_raw(7));
        queue.push(
            vec![(c, vec![bind(0, 4096).memory(memory), bind(4096, 4096)])],
            None,
        );
        assert_eq!(queue.page_binds(), 8);
        queue.forget(&[a], &[memory]);
        assert_eq!(queue.batches(), 3, "every batch stays");
        assert_eq!(queue.page_binds(), 4);
        let buffers: Vec<Vec<vk::Buffer>> = queue
            .infos()
            .iter()
            .map(|(infos, _)| infos.iter().map(|info| info.buffer).collect())
            .collect();
        assert_eq!(buffers, vec![vec![b], vec![], vec![b, c]]);
        let waits: Vec<Option<u64>> = queue.infos().iter().map(|(_, wait)| *wait).collect();
        assert_eq!(waits, vec![None, Some(2), None], "waits stay");
        // A buffer whose binds all go leaves no empty entry (Vulkan wants at least one bind).
        queue.forget(&[], &[vk::DeviceMemory::null()]);
        let counts: Vec<Vec<u32>> = queue
            .infos()
            .iter()
            .map(|(infos, _)| infos.iter().map(|info| info.bind_count).collect())
            .collect();
        assert_eq!(counts, vec![Vec::<u32>::new(); 3]);
    }
}
