//! The mapped stretches of one simulated address range ([`VirtualSegments`]'s bookkeeping):
//! what is mapped, so that a map of mapped pages or an unmap of unmapped ones is caught.
//!
//! Stretches are kept as a sorted vector of disjoint, non-touching `start..end` pairs: a
//! range holds a few of them to a few hundred, so a change is one binary search and a short
//! move, with no node to allocate or free.
//!
//! [`VirtualSegments`]: super::VirtualSegments

use std::ops::Range;

/// Mapped stretches, ascending, none empty, no two touching or overlapping.
#[derive(Debug, Clone, Default)]
pub(crate) struct MappedRuns {
    runs: Vec<(u64, u64)>,
}

impl MappedRuns {
    /// The index of the first stretch that starts at or after `at`.
    #[inline]
    fn first_from(&self, at: u64) -> usize {
        self.runs.partition_point(|&(start, _)| start < at)
    }

    /// Whether any byte of `run` is mapped.
    pub fn overlaps(&self, run: &Range<u64>) -> bool {
        let i = self.first_from(run.start);
        let before = i > 0 && self.runs[i - 1].1 > run.start;
        let within = self.runs.get(i).is_some_and(|&(start, _)| start < run.end);
        before || within
    }

    /// Whether every byte of `run` (not empty) is mapped.
    pub fn covers(&self, run: &Range<u64>) -> bool {
        // The stretch that starts at or before `run.start`.
        let i = self.runs.partition_point(|&(start, _)| start <= run.start);
        i > 0 && self.runs[i - 1].1 >= run.end
    }

    /// Marks `run` (not empty) mapped, joined with touching stretches, if no byte of it is
    /// mapped; returns whether it did, in one search.
    pub fn map_if_unmapped(&mut self, run: &Range<u64>) -> bool {
        debug_assert!(run.start < run.end);
        let i = self.first_from(run.start);
        let below = i.checked_sub(1).map(|j| self.runs[j].1);
        let above = self.runs.get(i).map(|&(start, _)| start);
        if below.is_some_and(|end| end > run.start) || above.is_some_and(|start| start < run.end) {
            return false;
        }
        match (below == Some(run.start), above == Some(run.end)) {
            (true, true) => {
                self.runs[i - 1].1 = self.runs[i].1;
                self.runs.remove(i);
            }
            (true, false) => self.runs[i - 1].1 = run.end,
            (false, true) => self.runs[i].0 = run.start,
            (false, false) => self.runs.insert(i, (run.start, run.end)),
        }
        true
    }

    /// Marks `run` (not empty) unmapped if every byte of it is mapped; returns whether it
    /// did, in one search.
    pub fn unmap_if_mapped(&mut self, run: &Range<u64>) -> bool {
        debug_assert!(run.start < run.end);
        let i = self.runs.partition_point(|&(start, _)| start <= run.start);
        let Some(at) = i.checked_sub(1) else {
            return false;
        };
        let (start, end) = self.runs[at];
        if end < run.end {
            return false;
        }
        match (start < run.start, run.end < end) {
            (true, true) => {
                self.runs[at].1 = run.start;
                self.runs.insert(at + 1, (run.end, end));
            }
            (true, false) => self.runs[at].1 = run.start,
            (false, true) => self.runs[at].0 = run.end,
            (false, false) => {
                self.runs.remove(at);
            }
        }
        true
    }

    /// Marks `run` (not empty, no byte of it mapped) mapped: the undo of an unmap.
    pub fn map(&mut self, run: &Range<u64>) {
        let mapped = self.map_if_unmapped(run);
        debug_assert!(mapped, "{run:?} was partly mapped");
    }

    /// Marks `run` (not empty, every byte of it mapped) unmapped: the undo of a map.
    pub fn unmap(&mut self, run: &Range<u64>) {
        let unmapped = self.unmap_if_mapped(run);
        debug_assert!(unmapped, "{run:?} was not all mapped");
    }

    /// Bytes of `start..end` that are mapped.
    pub fn mapped_within(&self, start: u64, end: u64) -> u64 {
        // From the stretch that starts at or before `start`, if any.
        let from = self
            .runs
            .partition_point(|&(s, _)| s <= start)
            .saturating_sub(1);
        self.runs[from..]
            .iter()
            .take_while(|&&(s, _)| s < end)
            .map(|&(s, e)| e.min(end).saturating_sub(s.max(start)))
            .sum()
    }

    /// Bytes mapped.
    pub fn total(&self) -> u64 {
        self.runs.iter().map(|&(start, end)| end - start).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_rng::xorshift;

    /// Against a page-by-page bitmap: every answer matches, and the stretches stay sorted,
    /// disjoint and joined.
    #[test]
    fn answers_as_a_bitmap_of_pages_does() {
        const PAGES: u64 = 200;
        let mut runs = MappedRuns::default();
        let mut mapped = [false; PAGES as usize];
        let mut next = xorshift(0x1319_8a2e_0370_7344u64);
        for _ in 0..20_000 {
            let start = next() % PAGES;
            let end = (start + 1 + next() % 12).min(PAGES);
            let run = start..end;
            let pages = &mut mapped[start as usize..end as usize];
            let any = pages.iter().any(|&m| m);
            let all = pages.iter().all(|&m| m);
            assert_eq!(runs.overlaps(&run), any, "{run:?}");
            assert_eq!(runs.covers(&run), all, "{run:?}");
            assert_eq!(
                runs.mapped_within(start, end),
                pages.iter().filter(|&&m| m).count() as u64
            );
            // A refused map or unmap changes nothing; one that is done changes exactly
            // the run's pages (checked against the bitmap by the next round's answers and
            // by the totals and the stretches' shape below).
            let before = runs.runs.clone();
            let mut refused = runs.clone();
            if any {
                assert!(!refused.map_if_unmapped(&run), "{run:?}");
                assert_eq!(refused.runs, before, "a refused map changes nothing");
            }
            if !all {
                assert!(!refused.unmap_if_mapped(&run), "{run:?}");
                assert_eq!(refused.runs, before, "a refused unmap changes nothing");
            }
            if !any {
                assert!(runs.map_if_unmapped(&run), "{run:?}");
                pages.fill(true);
            } else if all {
                assert!(runs.unmap_if_mapped(&run), "{run:?}");
                pages.fill(false);
            }
            assert_eq!(runs.total(), mapped.iter().filter(|&&m| m).count() as u64);
            for pair in runs.runs.windows(2) {
                assert!(pair[0].0 < pair[0].1 && pair[0].1 < pair[1].0, "{pair:?}");
            }
        }
    }
}
