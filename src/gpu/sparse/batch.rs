//! Maps queued to reach the driver together: many maps, one `vkQueueBindSparse`.
//!
//! A workload that maps a little at a time (a KV cache growing by a token) makes a bind call
//! per map. Where binds are ordered on the GPU (timeline semaphores), a map need not reach
//! the driver before the GPU work that uses it is submitted: pools queue their maps on the
//! device ([`SparseDevice::queue_map`]) and the queue goes to the driver in one call when it
//! holds a pool's `bind_batch` maps, before any other bind (an unmap or a reclaim of spare
//! pages, which must follow the maps queued before them), before the CPU waits for binds (a
//! range's buffer or a chunk given back), and before every submission wgpu makes on the
//! device: wgpu's `vkQueueSubmit` goes through the queue's gate (the `gate` module), which
//! submits the queue first. Work that uses a queued map waits for its bind on the GPU, as
//! for any map. (On an H100 this took a decode's first run from 265 calls to 148 and about
//! 10% less time; training, whose driver work goes by pages, gained nothing:
//! docs/BENCHMARKS.md, calls 32 and 33.)
//!
//! A batch never binds the same pages of a buffer twice, so that nothing relies on an order
//! among the binds of one batch: a map that touches pages a queued bind touches (an unbind
//! of spare pages bound by a queued map, say) sends the queue first.

use ash::vk;

use super::device::SparseDevice;
use super::error::SparseError;

/// Binds waiting for one `vkQueueBindSparse`, per buffer, in the order they were queued.
#[derive(Debug, Default)]
pub(crate) struct QueuedBinds {
    buffers: Vec<(vk::Buffer, Vec<vk::SparseMemoryBind>)>,
    maps: usize,
}

impl QueuedBinds {
    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// Maps queued.
    pub fn maps(&self) -> usize {
        self.maps
    }

    /// Whether any bind of `entries` touches bytes of its buffer that a queued bind touches.
    pub fn overlaps(&self, entries: &[(vk::Buffer, Vec<vk::SparseMemoryBind>)]) -> bool {
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

    /// Queues the binds of one map. The caller checked [`overlaps`](Self::overlaps).
    pub fn push(&mut self, entries: Vec<(vk::Buffer, Vec<vk::SparseMemoryBind>)>) {
        for (buffer, binds) in entries {
            match self
                .buffers
                .iter_mut()
                .find(|(queued, _)| *queued == buffer)
            {
                Some((_, queued)) => queued.extend(binds),
                None => self.buffers.push((buffer, binds)),
            }
        }
        self.maps += 1;
    }

    /// The queue as the bind infos of one batch, one per buffer.
    pub fn infos(&self) -> Vec<vk::SparseBufferMemoryBindInfo<'_>> {
        self.buffers
            .iter()
            .map(|(buffer, binds)| {
                vk::SparseBufferMemoryBindInfo::default()
                    .buffer(*buffer)
                    .binds(binds)
            })
            .collect()
    }
}

impl SparseDevice {
    /// Queues the binds of one map (`entries`: binds into each buffer) for a later
    /// `vkQueueBindSparse` shared with other maps. Returns the bind timeline value that call
    /// signals (wgpu work that uses the map must wait for it:
    /// [`Timelines::gpu_waits_for_bind`](super::timeline::Timelines::gpu_waits_for_bind)),
    /// and the calls made here.
    ///
    /// The queue is submitted first when `entries` touch pages a queued bind touches, and
    /// after the map joined it when it then holds `batch` maps or more. Needs timelines.
    ///
    /// # Errors
    ///
    /// The driver's error when the queue could not be submitted before the map joined it:
    /// the map is not queued (what was queued stays queued). Once the map is queued, it is
    /// bound by a later call: a failure of the submission after it is left to that call
    /// (the next wgpu submission on the device, or the next unmap, reports it).
    pub(crate) fn queue_map(
        &self,
        entries: Vec<(vk::Buffer, Vec<vk::SparseMemoryBind>)>,
        batch: usize,
    ) -> Result<(u64, u64), SparseError> {
        let timelines = self.timelines();
        {
            // Most maps only join the queue: no need to hold the queue's gate for that.
            let mut line = timelines.line();
            if line.queued.maps() + 1 < batch && !line.queued.overlaps(&entries) {
                line.queued.push(entries);
                return Ok((line.last + 1, 0));
            }
        }
        let _held = self.inner.gate.hold();
        let mut line = timelines.line();
        let mut calls = 0;
        if line.queued.overlaps(&entries) {
            calls += u64::from(self.submit_queued_held(&mut line)?);
        }
        line.queued.push(entries);
        let value = line.last + 1;
        if line.queued.maps() >= batch && self.submit_queued_held(&mut line).is_ok() {
            calls += 1;
        }
        Ok((value, calls))
    }

    /// Submits the queued maps now, if any; returns whether there were.
    ///
    /// # Errors
    ///
    /// The driver's error; the maps stay queued.
    pub(crate) fn submit_queued(&self) -> Result<bool, SparseError> {
        self.submit_queued_holding(false)
    }

    /// Submits the queued maps before wgpu submits on `queue_gate`'s queue, whose gate the
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

    /// Submits the queued maps, if any, taking the bind queue's gate unless the caller
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

    /// Binds of one map queue per buffer, in order; the maps are counted; only bytes of the
    /// same buffer that a queued bind touches overlap (touching ends do not).
    #[test]
    fn the_queue_keeps_binds_per_buffer_and_finds_overlaps() {
        let (a, b) = (vk::Buffer::from_raw(1), vk::Buffer::from_raw(2));
        let mut queue = QueuedBinds::default();
        assert!(queue.is_empty());
        queue.push(vec![(a, vec![bind(0, 4096)]), (b, vec![bind(8192, 4096)])]);
        queue.push(vec![(a, vec![bind(16384, 8192)])]);
        assert_eq!(queue.maps(), 2);
        let infos = queue.infos();
        assert_eq!(infos.len(), 2, "one info per buffer");
        assert_eq!(infos[0].buffer, a);
        assert_eq!(infos[0].bind_count, 2);
        assert_eq!(infos[1].buffer, b);
        assert_eq!(infos[1].bind_count, 1);
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
            assert_eq!(queue.overlaps(&entries), overlaps, "{entries:?}");
        }
    }
}
