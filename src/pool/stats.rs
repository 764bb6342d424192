//! Statistics: PyTorch's `memory_stats` for device and host memory, the summary table, the
//! snapshot, and torch-style shortcuts.

use std::collections::{BTreeMap, HashMap};

use super::pool_shared::PoolState;
use super::{Pool, Residency};
use crate::engine::{MemoryStats, SegmentId, SegmentSnapshot};
use crate::format::{bytes, count, quoted};

impl Pool {
    /// A copy of the device statistics, with PyTorch's keys and meanings.
    ///
    /// Blocks served from host memory by `overflow:host` are counted in
    /// [`host_memory_stats`](Pool::host_memory_stats), and the device failure that sent them
    /// there in [`num_host_overflows`](Pool::num_host_overflows), not in `num_ooms`.
    /// `num_alloc_retries` does count those requests: the cache was released and the
    /// device tried again before the pool turned to host memory.
    pub fn memory_stats(&self) -> MemoryStats {
        self.shared.lock_flushed().engine.memory_stats()
    }

    /// Statistics of host-resident memory (overflow and offloaded blocks), kept apart from the
    /// device statistics of [`memory_stats`](Pool::memory_stats). `None` until the pool first
    /// uses host memory.
    pub fn host_memory_stats(&self) -> Option<MemoryStats> {
        self.shared
            .lock_flushed()
            .host
            .as_ref()
            .map(|host| host.engine.memory_stats())
    }

    /// Requests served from host memory because the device could not serve them
    /// (`overflow:host`), since creation or [`reset_accumulated_stats`](Pool::reset_accumulated_stats).
    pub fn num_host_overflows(&self) -> u64 {
        self.shared.lock().host_overflows
    }

    /// Bytes of device memory used by live blocks (torch's `memory_allocated`).
    pub fn memory_allocated(&self) -> u64 {
        self.memory_stats().allocated_bytes.all.current
    }

    /// The peak of [`memory_allocated`](Pool::memory_allocated) (torch's
    /// `max_memory_allocated`), since creation or [`reset_peak_stats`](Pool::reset_peak_stats).
    pub fn max_memory_allocated(&self) -> u64 {
        self.memory_stats().allocated_bytes.all.peak
    }

    /// Bytes of device memory reserved by the pool's segments (torch's `memory_reserved`).
    pub fn memory_reserved(&self) -> u64 {
        self.memory_stats().reserved_bytes.all.current
    }

    /// The peak of [`memory_reserved`](Pool::memory_reserved) (torch's `max_memory_reserved`).
    pub fn max_memory_reserved(&self) -> u64 {
        self.memory_stats().reserved_bytes.all.peak
    }

    /// Bytes of dropped blocks that wait for a submission point (see
    /// [`FreeTiming`](super::FreeTiming)); they are still counted as allocated.
    pub fn held_bytes(&self) -> u64 {
        self.shared.lock().held_bytes
    }

    /// Bytes of dropped (or moved) blocks whose memory a [`BlockRef`](super::BlockRef) still
    /// keeps, for example that of a [`PoolBindGroup`](super::PoolBindGroup) still alive; they
    /// are still counted as allocated.
    pub fn referenced_bytes(&self) -> u64 {
        self.shared
            .referenced_bytes
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sets every peak statistic to its current value.
    pub fn reset_peak_stats(&self) {
        let mut state = self.shared.lock_flushed();
        state.engine.reset_peak_stats();
        if let Some(host) = &mut state.host {
            host.engine.reset_peak_stats();
        }
    }

    /// Zeroes the accumulated totals and counters (PyTorch's
    /// `reset_accumulated_memory_stats`), host overflows included.
    pub fn reset_accumulated_stats(&self) {
        let mut state = self.shared.lock_flushed();
        state.engine.reset_accumulated_stats();
        state.host_overflows = 0;
        if let Some(residents) = &mut state.residents {
            residents.reset_counters();
        }
        if let Some(host) = &mut state.host {
            host.engine.reset_accumulated_stats();
        }
    }

    /// The statistics as a text table.
    ///
    /// Lines follow for blocks held back until a submission point, for residency (the
    /// budget, resident and evicted bytes, moves) and for host overflows,
    /// and, with host memory in use, a second table for the host-resident blocks.
    pub fn memory_summary(&self) -> String {
        let state = self.shared.lock_flushed();
        let mut out = state.engine.memory_summary();
        let usage = state.memory.usage_report();
        out.push_str(&format!(
            "memory mode: {} ({}); device memory {} in {}\n",
            usage.mode,
            state.mode_reason,
            bytes(usage.device_bytes),
            count(usage.allocations, "allocation", "allocations")
        ));
        if !state.held.is_empty() {
            out.push_str(&format!(
                "{} ({}) wait for their recorded commands to be submitted before they are \
                 freed ({} open on the device)\n",
                count(state.held.len() as u64, "dropped block", "dropped blocks"),
                bytes(state.held_bytes),
                count(
                    self.shared.submissions.recordings.open_count() as u64,
                    "recording",
                    "recordings"
                ),
            ));
        }
        let referenced = self.referenced_bytes();
        if referenced > 0 {
            out.push_str(&format!(
                "{} of dropped or moved blocks are kept by bind groups or prepared kernels \
                 that still bind them\n",
                bytes(referenced)
            ));
        }
        if let Some(residents) = &state.residents {
            let r = residents.stats();
            out.push_str(&format!(
                "residency: budget {}; {} resident and {} evicted of {}; {} ({}) and {} \
                 ({}) since the last reset, {:.3} s moving\n",
                bytes(r.budget_bytes),
                bytes(r.resident_bytes),
                bytes(r.evicted_bytes),
                count(r.tracked_blocks, "tracked block", "tracked blocks"),
                count(r.evictions, "eviction", "evictions"),
                bytes(r.evicted_bytes_total),
                count(r.restores, "restore", "restores"),
                bytes(r.restored_bytes_total),
                r.move_time.as_secs_f64(),
            ));
        }
        if state.host_overflows > 0 {
            out.push_str(&format!(
                "{} served from host memory (overflow:host)\n",
                count(state.host_overflows, "request was", "requests were")
            ));
        }
        if !state.labels.is_empty() {
            out.push_str("live labelled blocks:\n");
            for (label, blocks, block_bytes) in by_label(&state) {
                out.push_str(&format!(
                    "  {}: {}, {}\n",
                    quoted(&label),
                    count(blocks, "block", "blocks"),
                    bytes(block_bytes)
                ));
            }
        }
        if let Some(host) = &state.host {
            out.push_str("host-resident memory (overflow, offloaded and evicted blocks):\n");
            out.push_str(&host.engine.memory_summary());
        }
        out
    }

    /// The device segments and their blocks, in address order; blocks allocated with
    /// [`alloc_labeled`](Pool::alloc_labeled) carry their label.
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        let state = self.shared.lock_flushed();
        let mut segments = state.engine.snapshot();
        if state.labels.is_empty() {
            return segments;
        }
        let labels: HashMap<(SegmentId, u64), &str> = state
            .labels
            .iter()
            .filter(|((residency, _), _)| *residency == Residency::Device)
            .map(|(_, block)| ((block.segment, block.offset), &*block.label))
            .collect();
        for segment in &mut segments {
            for block in &mut segment.blocks {
                if block.allocated {
                    block.label = labels
                        .get(&(segment.id, block.offset))
                        .map(|label| label.to_string());
                }
            }
        }
        segments
    }

    /// The blocks still allocated, device and host memory together: how many and how many
    /// bytes, by label (unlabelled blocks as one line), or `None` when there are none.
    /// Blocks held back until a submission point count as allocated.
    ///
    /// With [`PoolOptions::with_log_leaks`](super::PoolOptions::with_log_leaks), the pool
    /// logs this when its last handle drops.
    pub fn leak_report(&self) -> Option<String> {
        leak_report(&self.shared.lock_flushed())
    }

    /// The cap on reserved device bytes, if any.
    pub fn memory_cap(&self) -> Option<u64> {
        self.shared.lock().engine.memory_cap()
    }

    /// Caps reserved device memory at `fraction` of the device's memory from now on
    /// (PyTorch's `torch.cuda.set_per_process_memory_fraction`), or at `memory_limit_mb` if
    /// that is smaller. Segments already reserved above a lowered cap stay until they are
    /// released (`empty_cache`); new segments obey it. Returns the new cap.
    ///
    /// # Errors
    ///
    /// [`EngineError`](crate::engine::EngineError) for a fraction outside 0 to 1, or when the
    /// device memory size is unknown (see
    /// [`PoolOptions::with_device_memory`](super::PoolOptions::with_device_memory)) and no
    /// `memory_limit_mb` is set. The cap is then unchanged.
    pub fn set_per_process_memory_fraction(
        &self,
        fraction: f64,
    ) -> Result<Option<u64>, crate::engine::EngineError> {
        let device_memory = self.shared.device_memory;
        let mut state = self.shared.lock();
        let cap = state
            .engine
            .set_per_process_memory_fraction(fraction, device_memory)?;
        // Pages-mode memory keeps its own copy of the cap.
        state.memory.set_limit(cap);
        Ok(cap)
    }
}

/// Live labelled blocks by label: (label, blocks, bytes), in label order.
fn by_label(state: &PoolState) -> Vec<(String, u64, u64)> {
    let mut groups: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for block in state.labels.values() {
        let group = groups.entry(&block.label).or_default();
        group.0 += 1;
        group.1 += block.capacity;
    }
    groups
        .into_iter()
        .map(|(label, (count, block_bytes))| (label.to_string(), count, block_bytes))
        .collect()
}

/// The blocks still allocated, or `None`; see [`Pool::leak_report`].
pub(super) fn leak_report(state: &PoolState) -> Option<String> {
    let device = state.engine.memory_stats();
    let host = state.host.as_ref().map(|host| host.engine.memory_stats());
    let live = device.allocation.all.current + host.map_or(0, |h| h.allocation.all.current);
    if live == 0 {
        return None;
    }
    let total =
        device.allocated_bytes.all.current + host.map_or(0, |h| h.allocated_bytes.all.current);
    let mut out = format!(
        "{} ({}) {} still allocated",
        count(live, "block", "blocks"),
        bytes(total),
        if live == 1 { "is" } else { "are" }
    );
    let mut labelled = (0u64, 0u64);
    for (label, blocks, block_bytes) in by_label(state) {
        out.push_str(&format!(
            "; {}: {} ({})",
            quoted(&label),
            count(blocks, "block", "blocks"),
            bytes(block_bytes)
        ));
        labelled.0 += blocks;
        labelled.1 += block_bytes;
    }
    if labelled.0 < live {
        out.push_str(&format!(
            "; unlabelled: {} ({})",
            count(live - labelled.0, "block", "blocks"),
            bytes(total.saturating_sub(labelled.1))
        ));
    }
    Some(out)
}
