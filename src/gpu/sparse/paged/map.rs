//! Mapping and unmapping pages of a range: the steps of a map (what spare pages back, new
//! pages laid over the rest, spare pages after its end, one bind call, and its undo on
//! failure) and an unmap. The page arithmetic is pure, in
//! [`page_plan`](super::super::page_plan); the bind call is in [`bind`](super::bind).

use ash::vk;

use super::super::chunks::PhysicalRun;
use super::super::error::SparseError;
use super::super::page_plan::{self, Placed};
use super::PagedMemory;
use super::bind::{BindKind, unbinds};

/// What the first step of a map took from spare pages (see
/// [`PagedMemory::take_spare_for`]), kept to finish the map or undo it.
pub(super) struct SpareTaken {
    /// Parts of the map that spare pages of its range back: mapped with no bind.
    covered: Vec<Placed>,
    /// Parts left to bind (offset, bytes).
    uncovered: Vec<(u64, u64)>,
    /// Spare pages of every range given back to the chunks, unbound in the map's call:
    /// (range, offset, pages).
    reclaimed: Vec<(u32, u64, PhysicalRun)>,
    /// Pages of `covered`.
    from_spare: u64,
}

impl PagedMemory {
    /// Binds memory behind every `(offset, len)` run of range `id`, in at most one
    /// `vkQueueBindSparse`. Runs are whole pages, inside the range, and not mapped yet.
    ///
    /// Parts of the runs that spare pages of the range already back are mapped with no bind.
    /// The rest takes free pages of the chunks; where they are too few, the spare pages of
    /// every range are unbound in the same call, and only then is a chunk allocated. Free
    /// pages left over (one free run of them, up to a preferred chunk) are bound as spare
    /// right after the map's end, as far as the range has unmapped room there.
    pub fn map(&mut self, id: u32, runs: &[(u64, u64)]) -> Result<(), SparseError> {
        let page = self.page_size();
        self.check_runs(id, runs)?;
        let state = self.range(id)?;
        if let Some(&(offset, len)) = runs
            .iter()
            .find(|&&(offset, len)| page_plan::overlaps(&state.mapped, page, offset, len))
        {
            return Err(SparseError::Invalid(format!(
                "range {id}: {offset}..{} is already partly mapped",
                offset + len
            )));
        }
        let total_pages: u64 = runs.iter().map(|&(_, len)| len / page).sum();
        if total_pages == 0 {
            return Ok(());
        }
        let taken = self.take_spare_for(id, runs);
        let need: u64 = taken.uncovered.iter().map(|&(_, len)| len / page).sum();
        let physical = if need > 0 {
            match self.chunks.take(&self.sparse, need, self.limit) {
                Ok(physical) => physical,
                Err(error) => {
                    self.undo_map(id, &taken, Vec::new());
                    return Err(error);
                }
            }
        } else {
            Vec::new()
        };
        let placed = page_plan::lay_out(&physical, &taken.uncovered, page);
        let spare = self.spare_after(id, runs, &taken);
        let entries = self.map_entries(id, &taken, &placed, &spare);
        if entries.is_empty() {
            self.counters.maps_from_spare += 1;
        } else if let Err(error) = self.submit_bind_call(&entries, BindKind::Map) {
            let given = physical
                .into_iter()
                .chain(spare.into_iter().map(|(_, run)| run))
                .collect();
            self.undo_map(id, &taken, given);
            return Err(error);
        }
        let spare_bytes: u64 = spare.iter().map(|(_, r)| r.pages as u64 * page).sum();
        let state = self.ranges[id as usize].as_mut().expect("checked live");
        for (offset, run) in taken.covered.into_iter().chain(placed) {
            state.mapped.insert(offset, run);
        }
        for (offset, run) in spare {
            state.spare.insert(offset, run);
        }
        self.spare_bytes += spare_bytes;
        self.counters.spare_bound_bytes_total += spare_bytes;
        let bytes = total_pages * page;
        self.mapped_bytes += bytes;
        self.counters.mapped_bytes_total += bytes;
        Ok(())
    }

    /// The first step of a map of `runs` of range `id`: takes what spare pages of the range
    /// already back, and where the free pages are too few for the rest, every range's spare
    /// pages back into the chunks (they are unbound in the map's own call).
    fn take_spare_for(&mut self, id: u32, runs: &[(u64, u64)]) -> SpareTaken {
        let page = self.page_size();
        let (mut covered, mut uncovered) = (Vec::new(), Vec::new());
        let state = self.ranges[id as usize].as_mut().expect("checked live");
        for &(offset, len) in runs.iter().filter(|&&(_, len)| len > 0) {
            let (c, u) = page_plan::take_covered(&mut state.spare, page, offset, len);
            covered.extend(c);
            uncovered.extend(u);
        }
        let from_spare: u64 = covered.iter().map(|(_, r)| r.pages as u64).sum();
        self.spare_bytes -= from_spare * page;
        let need: u64 = uncovered.iter().map(|&(_, len)| len / page).sum();
        let mut reclaimed: Vec<(u32, u64, PhysicalRun)> = Vec::new();
        if need > self.chunks.free_pages() && self.spare_bytes > 0 {
            for (range_id, state) in self.ranges.iter_mut().enumerate() {
                let Some(state) = state else { continue };
                for (offset, run) in std::mem::take(&mut state.spare) {
                    reclaimed.push((range_id as u32, offset, run));
                }
            }
            for &(_, _, run) in &reclaimed {
                self.spare_bytes -= run.pages as u64 * page;
                self.chunks.give(run);
            }
        }
        SpareTaken {
            covered,
            uncovered,
            reclaimed,
            from_spare,
        }
    }

    /// Undoes [`take_spare_for`](Self::take_spare_for) after a failed map of range `id`,
    /// giving back `given`, the pages the map took from the chunks.
    fn undo_map(&mut self, id: u32, taken: &SpareTaken, given: Vec<PhysicalRun>) {
        let page = self.page_size();
        for run in given {
            self.chunks.give(run);
        }
        for &(range_id, offset, run) in &taken.reclaimed {
            self.chunks.take_exact(run);
            self.spare_bytes += run.pages as u64 * page;
            let state = self.ranges[range_id as usize].as_mut().expect("live");
            state.spare.insert(offset, run);
        }
        let state = self.ranges[id as usize].as_mut().expect("checked live");
        for &(offset, run) in &taken.covered {
            state.spare.insert(offset, run);
        }
        self.spare_bytes += taken.from_spare * page;
    }

    /// The spare pages a map of `runs` of range `id` binds right after its end: free pages
    /// of the chunks from one free run, up to a preferred chunk, as far as the range has
    /// unbound room there; none where the map unbinds spare pages of this range (a range of
    /// a resource is bound at most once per batch).
    fn spare_after(&mut self, id: u32, runs: &[(u64, u64)], taken: &SpareTaken) -> Vec<Placed> {
        let page = self.page_size();
        let map_end = runs.iter().map(|&(o, l)| o + l).max().unwrap_or(0);
        let mut spare = Vec::new();
        let reclaims_here = taken
            .reclaimed
            .iter()
            .any(|&(range_id, _, _)| range_id == id);
        if !self.chunks.binds_spare() || reclaims_here {
            return spare;
        }
        let state = self.ranges[id as usize].as_ref().expect("checked live");
        let room_end =
            page_plan::room_end(&state.mapped, &state.spare, map_end, state.range.size());
        let pages = (room_end.saturating_sub(map_end) / page)
            .min(self.chunks.free_pages())
            .min(self.chunks.preferred_pages());
        // One free run at most: spare pages are a bet on the next map, not worth a bind entry
        // and an extent for every fragment of free memory.
        spare.extend(self.chunks.take_run(pages).map(|run| (map_end, run)));
        spare
    }

    /// The entries of a map's one bind call: unbinds of the reclaimed spare pages, range by
    /// range, then the binds of range `id` (placed pages and new spare pages).
    fn map_entries(
        &self,
        id: u32,
        taken: &SpareTaken,
        placed: &[Placed],
        spare: &[Placed],
    ) -> Vec<(u32, Vec<vk::SparseMemoryBind>)> {
        let page = self.page_size();
        let mut entries: Vec<(u32, Vec<vk::SparseMemoryBind>)> = Vec::new();
        let mut reclaim_ranges: Vec<u32> = taken.reclaimed.iter().map(|&(r, _, _)| r).collect();
        reclaim_ranges.dedup();
        for range_id in reclaim_ranges {
            let runs = taken
                .reclaimed
                .iter()
                .filter(|&&(r, _, _)| r == range_id)
                .map(|&(_, offset, run)| (offset, run.pages as u64 * page));
            entries.push((range_id, unbinds(runs)));
        }
        let binds: Vec<vk::SparseMemoryBind> = placed
            .iter()
            .chain(spare)
            .map(|&(offset, run)| {
                vk::SparseMemoryBind::default()
                    .resource_offset(offset)
                    .size(run.pages as u64 * page)
                    .memory(self.chunks.memory(run.chunk))
                    .memory_offset(run.first as u64 * page)
            })
            .collect();
        if !binds.is_empty() {
            entries.push((id, binds));
        }
        entries
    }

    /// Unbinds every `(offset, len)` run of range `id` (each wholly mapped) in one
    /// `vkQueueBindSparse`, after all work submitted so far has finished on the GPU. The
    /// memory stays in its chunks for later maps.
    pub fn unmap(&mut self, id: u32, runs: &[(u64, u64)]) -> Result<(), SparseError> {
        let page = self.page_size();
        self.check_runs(id, runs)?;
        for &(offset, len) in runs {
            if !self.is_mapped(id, offset, len) {
                return Err(SparseError::Invalid(format!(
                    "range {id}: {offset}..{} is not wholly mapped",
                    offset + len
                )));
            }
        }
        if runs.iter().all(|&(_, len)| len == 0) {
            return Ok(());
        }
        let raw_runs: Vec<(u64, u64)> = runs.to_vec();
        let binds = unbinds(raw_runs.iter().copied().filter(|&(_, len)| len > 0));
        self.submit_bind_call(&[(id, binds)], BindKind::Unmap)?;
        let state = self.ranges[id as usize].as_mut().expect("checked live");
        let mut freed = Vec::new();
        for &(offset, len) in &raw_runs {
            let (covered, _) = page_plan::take_covered(&mut state.mapped, page, offset, len);
            freed.extend(covered.into_iter().map(|(_, run)| run));
        }
        for run in freed {
            self.chunks.give(run);
        }
        let bytes: u64 = raw_runs.iter().map(|&(_, len)| len).sum();
        self.mapped_bytes -= bytes;
        self.counters.unmapped_bytes_total += bytes;
        Ok(())
    }

    pub(super) fn check_runs(&self, id: u32, runs: &[(u64, u64)]) -> Result<(), SparseError> {
        let page = self.page_size();
        let size = self.range(id)?.range.size();
        match runs
            .iter()
            .find(|&&run| !page_plan::runs_fit(&[run], page, size))
        {
            Some(&(offset, len)) => Err(SparseError::Invalid(format!(
                "range {id} of {size} bytes: run {offset}+{len} is not whole {page} B pages \
                 inside it"
            ))),
            None => Ok(()),
        }
    }
}
