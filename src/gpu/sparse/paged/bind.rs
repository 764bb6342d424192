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
    /// the waiting; without, the CPU does (a fence, and for an unmap a wait for the GPU
    /// first).
    pub(super) fn submit_bind_call(
        &mut self,
        entries: &[(u32, Vec<vk::SparseMemoryBind>)],
        kind: BindKind,
    ) -> Result<(), SparseError> {
        if kind == BindKind::Map && self.bind_batch > 1 && self.sparse.orders_on_gpu() {
            return self.queue_map(entries);
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
        let timelines = sparse.inner.timelines.as_ref();
        let after_gpu = match (kind, timelines) {
            (BindKind::Unmap, Some(timelines)) => {
                // Read before any signal: work counted up to here was submitted before it.
                let clock = self
                    .work_clock
                    .as_ref()
                    .map(|points| points.load(Ordering::SeqCst));
                match (clock, self.last_unbind_signal) {
                    // No work was submitted since the last signal: it covers this unbind
                    // (and the maps queued go in the unbind's own call, as its first batch).
                    (Some(now), Some((at, value))) if now == at => Some(value),
                    _ => {
                        // The empty submission below would submit the queued maps in a
                        // call of its own: made here, it counts as this memory's. (They
                        // cannot join the unbind's call: on a queue shared with wgpu, the
                        // submission would then wait for a bind that waits for it.)
                        let start = Instant::now();
                        let queued = sparse.submit_queued();
                        self.counters.bind_time += start.elapsed();
                        self.counters.bind_calls += u64::from(queued?);
                        // The empty submission that marks the work the unbind waits for is
                        // part of the cost of unbinding.
                        let start = Instant::now();
                        let value = timelines.gpu_done(&self.queue);
                        self.counters.bind_time += start.elapsed();
                        self.counters.unbind_signals += 1;
                        self.last_unbind_signal = clock.map(|at| (at, value));
                        Some(value)
                    }
                }
            }
            (BindKind::Unmap, None) => {
                self.wait_for_gpu();
                None
            }
            (BindKind::Map | BindKind::Reclaim, _) => None,
        };
        let start = Instant::now();
        let result = match timelines {
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

    /// Queues the binds of a map on the device, to reach the driver with other maps in one
    /// call (`page_bind_batch`); wgpu's next submission waits for them on the GPU.
    fn queue_map(
        &mut self,
        entries: &[(u32, Vec<vk::SparseMemoryBind>)],
    ) -> Result<(), SparseError> {
        let start = Instant::now();
        let mut queued = Vec::with_capacity(entries.len());
        for (id, binds) in entries {
            queued.push((self.range(*id)?.range.raw(), binds.clone()));
        }
        let sparse = self.sparse.clone();
        let result = sparse.queue_map(queued, self.bind_batch);
        if let Ok((value, _)) = result {
            sparse.timelines().gpu_waits_for_bind(&self.queue, value);
        }
        self.counters.bind_time += start.elapsed();
        let (_, calls) = result?;
        self.counters.bind_calls += calls;
        self.counters.maps_queued += 1;
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
