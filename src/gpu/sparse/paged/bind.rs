//! One `vkQueueBindSparse` of a pool's pages-mode memory, ordered with the GPU's other work.

use std::sync::atomic::Ordering;
use std::time::Instant;

use ash::vk;

use super::super::error::SparseError;
use super::PagedMemory;

/// What a bind does, for its ordering with GPU work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BindKind {
    Map,
    Unmap,
    /// Unbinding spare pages only: no GPU work ever used them.
    Reclaim,
}

/// Unbinds of `runs` (offset, bytes): the entries of a bind call.
pub(super) fn unbinds(runs: impl IntoIterator<Item = (u64, u64)>) -> Vec<vk::SparseMemoryBind> {
    runs.into_iter()
        .map(|(offset, len)| {
            vk::SparseMemoryBind::default()
                .resource_offset(offset)
                .size(len)
                .memory(vk::DeviceMemory::null())
        })
        .collect()
}

impl PagedMemory {
    /// One `vkQueueBindSparse` of `entries` (binds into each named range), ordered with the
    /// GPU: a map before any later wgpu work, an unmap after all earlier wgpu work, a
    /// reclaim of spare pages (which no work used) with neither. With timelines the GPU does
    /// the waiting, and with a batch (`bind_batch` above 1) the binds wait on the device for
    /// a call shared with other binds (the `batch` module); without timelines the CPU waits
    /// (a fence, and for an unmap a wait for the GPU first).
    pub(super) fn submit_bind_call(
        &mut self,
        entries: &[(u32, Vec<vk::SparseMemoryBind>)],
        kind: BindKind,
    ) -> Result<(), SparseError> {
        let ordered = self.sparse.orders_on_gpu();
        let after_gpu = match kind {
            BindKind::Unmap if ordered => Some(self.unbind_signal()?),
            BindKind::Unmap => {
                self.wait_for_gpu();
                None
            }
            BindKind::Map | BindKind::Reclaim => None,
        };
        if ordered && self.bind_batch > 1 {
            return self.queue_binds(entries, kind, after_gpu);
        }
        let mut infos = Vec::with_capacity(entries.len());
        for (id, binds) in entries {
            let buffer = self.range(*id)?.range.raw();
            infos.push(
                vk::SparseBufferMemoryBindInfo::default()
                    .buffer(buffer)
                    .binds(binds),
            );
        }
        let sparse = self.sparse.clone();
        let start = Instant::now();
        let result = match sparse.inner.timelines.as_ref() {
            Some(timelines) => sparse
                .bind_ordered(&infos, after_gpu)
                .map(|(value, calls)| {
                    if kind == BindKind::Map {
                        timelines.gpu_waits_for_bind(&self.queue, value);
                    }
                    calls
                }),
            None => sparse.bind(&infos).map(|()| 1),
        };
        self.counters.bind_time += start.elapsed();
        let calls = result?;
        self.counters.bind_calls += calls;
        Ok(())
    }

    /// The GPU timeline value an unbind waits for: every wgpu submission made before now
    /// has finished by then. Where the work clock shows no submission since the last
    /// unbind's signal, that signal; else a new one (an empty wgpu submission, after the
    /// binds queued on the device are submitted: made here, their call counts as this
    /// memory's). Needs timelines.
    fn unbind_signal(&mut self) -> Result<u64, SparseError> {
        // Read before any signal: work counted up to here was submitted before it.
        let clock = self
            .work_clock
            .as_ref()
            .map(|points| points.load(Ordering::SeqCst));
        if let (Some(now), Some((at, value))) = (clock, self.last_unbind_signal)
            && now == at
        {
            return Ok(value);
        }
        self.submit_queued_binds()?;
        let sparse = self.sparse.clone();
        // The empty submission that marks the work the unbind waits for is part of the cost
        // of unbinding.
        let start = Instant::now();
        let value = sparse.timelines().gpu_done(&self.queue);
        self.counters.bind_time += start.elapsed();
        self.counters.unbind_signals += 1;
        self.last_unbind_signal = clock.map(|at| (at, value));
        Ok(value)
    }

    /// Queues `entries` on the device, to reach the driver with other binds in one call
    /// (`page_bind_batch`); an unmap's binds wait for GPU timeline value `after_gpu`. wgpu's
    /// next submission waits on the GPU for a map's binds.
    fn queue_binds(
        &mut self,
        entries: &[(u32, Vec<vk::SparseMemoryBind>)],
        kind: BindKind,
        after_gpu: Option<u64>,
    ) -> Result<(), SparseError> {
        let start = Instant::now();
        let mut queued = Vec::with_capacity(entries.len());
        for (id, binds) in entries {
            queued.push((self.range(*id)?.range.raw(), binds.clone()));
        }
        let sparse = self.sparse.clone();
        let (value, calls) = sparse.queue_binds(queued, after_gpu, self.bind_batch);
        if kind == BindKind::Map {
            sparse.timelines().gpu_waits_for_bind(&self.queue, value);
            self.counters.maps_queued += 1;
        } else {
            self.counters.unmaps_queued += 1;
        }
        self.counters.bind_time += start.elapsed();
        self.counters.bind_calls += calls;
        Ok(())
    }

    /// Waits until everything submitted to the device so far (and writes queued before
    /// now) has finished.
    pub(super) fn wait_for_gpu(&mut self) {
        let start = Instant::now();
        let index = self.queue.submit(std::iter::empty());
        // A device lost or timed out leaves nothing running to wait for.
        let _ = self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        });
        self.counters.unmap_wait_time += start.elapsed();
    }
}
