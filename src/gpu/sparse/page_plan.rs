//! Pure page planning for address ranges: which parts of a map spare pages already back,
//! how physical pages are laid over the rest, how far spare pages may follow a map, and
//! which physical pages an unmap frees. No Vulkan and no memory here: `paged` turns these
//! plans into binds.
//!
//! An *extent map* holds, for one range, offset -> the physical pages bound there; its
//! extents never overlap. Offsets and lengths are whole pages of `page` bytes.

use std::collections::BTreeMap;

use super::chunks::PhysicalRun;

/// Bound extents of one range: offset -> the physical pages behind it.
pub(crate) type Extents = BTreeMap<u64, PhysicalRun>;

/// Physical pages placed at an offset of a range.
pub(crate) type Placed = (u64, PhysicalRun);

/// The end offset of `run` placed at `start`.
fn end_of(start: u64, run: &PhysicalRun, page: u64) -> u64 {
    start + u64::from(run.pages) * page
}

/// Whether some extent of `extents` overlaps `offset..offset + len`.
pub(crate) fn overlaps(extents: &Extents, page: u64, offset: u64, len: u64) -> bool {
    extents
        .range(..offset + len)
        .next_back()
        .is_some_and(|(&start, run)| end_of(start, run, page) > offset)
}

/// Whether the extents of `extents` cover every byte of `offset..offset + len` (true for
/// an empty run).
pub(crate) fn covers(extents: &Extents, page: u64, offset: u64, len: u64) -> bool {
    let end = offset + len;
    let mut at = offset;
    while at < end {
        match extents.range(..=at).next_back() {
            Some((&start, run)) if end_of(start, run, page) > at => at = end_of(start, run, page),
            _ => return false,
        }
    }
    true
}

/// Removes the parts of `offset..offset + len` that extents of `extents` cover, cutting
/// the extents that stick out, and returns them (offset, physical pages) and the parts they
/// do not cover (offset, bytes), each in order. The pages returned and the pages left in
/// `extents` are exactly the pages `extents` held.
pub(crate) fn take_covered(
    extents: &mut Extents,
    page: u64,
    offset: u64,
    len: u64,
) -> (Vec<Placed>, Vec<(u64, u64)>) {
    let (mut covered, mut uncovered) = (Vec::new(), Vec::new());
    let end = offset + len;
    let mut at = offset;
    while at < end {
        let holding = extents
            .range(..=at)
            .next_back()
            .map(|(&start, &run)| (start, run))
            .filter(|(start, run)| end_of(*start, run, page) > at);
        match holding {
            Some((start, run)) => {
                extents.remove(&start);
                let cut_start = ((at - start) / page) as u32;
                let cut_end = ((end_of(start, &run, page).min(end) - start) / page) as u32;
                if cut_start > 0 {
                    extents.insert(
                        start,
                        PhysicalRun {
                            pages: cut_start,
                            ..run
                        },
                    );
                }
                if cut_end < run.pages {
                    extents.insert(
                        start + u64::from(cut_end) * page,
                        PhysicalRun {
                            chunk: run.chunk,
                            first: run.first + cut_end,
                            pages: run.pages - cut_end,
                        },
                    );
                }
                covered.push((
                    at,
                    PhysicalRun {
                        chunk: run.chunk,
                        first: run.first + cut_start,
                        pages: cut_end - cut_start,
                    },
                ));
                at = start + u64::from(cut_end) * page;
            }
            None => {
                let next = extents.range(at..).next().map_or(end, |(&s, _)| s.min(end));
                uncovered.push((at, next - at));
                at = next;
            }
        }
    }
    (covered, uncovered)
}

/// Lays the pages of `physical`, in order, over the runs `uncovered` (offset, bytes), in
/// order: every run gets exactly its pages, a physical run split where a run ends.
///
/// # Panics
///
/// Where `physical` holds fewer pages than `uncovered` needs (a caller's bug: it takes
/// exactly as many).
pub(crate) fn lay_out(
    physical: &[PhysicalRun],
    uncovered: &[(u64, u64)],
    page: u64,
) -> Vec<Placed> {
    let mut placed = Vec::new();
    let mut source = physical.iter().copied();
    let mut current = source.next();
    for &(offset, len) in uncovered {
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let run = current.as_mut().expect("as many pages as the runs hold");
            let pages = u64::from(run.pages).min((end - at) / page) as u32;
            placed.push((
                at,
                PhysicalRun {
                    chunk: run.chunk,
                    first: run.first,
                    pages,
                },
            ));
            at += u64::from(pages) * page;
            run.first += pages;
            run.pages -= pages;
            if run.pages == 0 {
                current = source.next();
            }
        }
    }
    placed
}

/// The end of the unbound room that starts at `from` in a range of `size` bytes whose
/// bound extents are `mapped` and `spare`: the next extent's offset, or `size`.
pub(crate) fn room_end(mapped: &Extents, spare: &Extents, from: u64, size: u64) -> u64 {
    let next_mapped = mapped.range(from..).next().map(|(&o, _)| o);
    let next_spare = spare.range(from..).next().map(|(&o, _)| o);
    [next_mapped, next_spare]
        .into_iter()
        .flatten()
        .fold(size, u64::min)
}

/// Whether every run (offset, bytes) is whole pages inside a range of `size` bytes.
pub(crate) fn runs_fit(runs: &[(u64, u64)], page: u64, size: u64) -> bool {
    runs.iter().all(|&(offset, len)| {
        offset % page == 0
            && len % page == 0
            && offset.checked_add(len).is_some_and(|end| end <= size)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    fn run(chunk: u32, first: u32, pages: u32) -> PhysicalRun {
        PhysicalRun {
            chunk,
            first,
            pages,
        }
    }

    fn pages_of(extents: &Extents) -> u64 {
        extents.values().map(|r| u64::from(r.pages)).sum()
    }

    /// Covered parts come out cut to the request, the rest stays, and nothing is lost.
    #[test]
    fn take_covered_cuts_extents_and_keeps_every_page() {
        // Pages 2..6 from chunk 0 (first 10), pages 8..9 from chunk 1 (first 0).
        let mut extents = Extents::from([(2 * PAGE, run(0, 10, 4)), (8 * PAGE, run(1, 0, 1))]);
        let (covered, uncovered) = take_covered(&mut extents, PAGE, 3 * PAGE, 7 * PAGE);
        assert_eq!(
            covered,
            vec![(3 * PAGE, run(0, 11, 3)), (8 * PAGE, run(1, 0, 1))]
        );
        assert_eq!(uncovered, vec![(6 * PAGE, 2 * PAGE), (9 * PAGE, PAGE)]);
        assert_eq!(extents, Extents::from([(2 * PAGE, run(0, 10, 1))]));
        // An extent reaching past the request keeps its tail.
        let mut extents = Extents::from([(0, run(2, 0, 8))]);
        let (covered, uncovered) = take_covered(&mut extents, PAGE, 2 * PAGE, 2 * PAGE);
        assert_eq!(covered, vec![(2 * PAGE, run(2, 2, 2))]);
        assert!(uncovered.is_empty());
        assert_eq!(
            extents,
            Extents::from([(0, run(2, 0, 2)), (4 * PAGE, run(2, 4, 4))])
        );
        assert_eq!(pages_of(&extents) + 2, 8);
    }

    /// Overlap and coverage read the extents as intervals.
    #[test]
    fn overlaps_and_covers_read_extents_as_intervals() {
        let extents = Extents::from([(0, run(0, 0, 2)), (2 * PAGE, run(1, 0, 1))]);
        assert!(
            covers(&extents, PAGE, 0, 3 * PAGE),
            "touching extents cover"
        );
        assert!(!covers(&extents, PAGE, 0, 4 * PAGE));
        assert!(
            covers(&extents, PAGE, 5 * PAGE, 0),
            "an empty run is covered"
        );
        assert!(overlaps(&extents, PAGE, 2 * PAGE, 4 * PAGE));
        assert!(!overlaps(&extents, PAGE, 3 * PAGE, 4 * PAGE));
    }

    /// Physical runs are laid over the requested runs in order, split where runs end.
    #[test]
    fn lay_out_splits_physical_runs_at_run_ends() {
        let physical = [run(0, 5, 3), run(1, 0, 2)];
        let uncovered = [(0, 2 * PAGE), (10 * PAGE, 3 * PAGE)];
        assert_eq!(
            lay_out(&physical, &uncovered, PAGE),
            vec![
                (0, run(0, 5, 2)),
                (10 * PAGE, run(0, 7, 1)),
                (11 * PAGE, run(1, 0, 2)),
            ]
        );
        assert!(lay_out(&[], &[], PAGE).is_empty());
    }

    /// The room after a map ends at the next bound extent, mapped or spare, or the range.
    #[test]
    fn room_ends_at_the_next_extent_or_the_range() {
        let mapped = Extents::from([(8 * PAGE, run(0, 0, 1))]);
        let spare = Extents::from([(6 * PAGE, run(0, 1, 1))]);
        assert_eq!(room_end(&mapped, &spare, 2 * PAGE, 16 * PAGE), 6 * PAGE);
        assert_eq!(room_end(&mapped, &spare, 9 * PAGE, 16 * PAGE), 16 * PAGE);
        assert_eq!(room_end(&Extents::new(), &spare, 0, 4 * PAGE), 4 * PAGE);
    }

    /// Runs must be whole pages inside the range.
    #[test]
    fn runs_fit_only_as_whole_pages_inside_the_range() {
        assert!(runs_fit(&[(0, PAGE), (3 * PAGE, PAGE)], PAGE, 4 * PAGE));
        assert!(!runs_fit(&[(0, 100)], PAGE, 4 * PAGE));
        assert!(!runs_fit(&[(3 * PAGE, 2 * PAGE)], PAGE, 4 * PAGE));
        assert!(!runs_fit(&[(u64::MAX - PAGE + 1, PAGE)], PAGE, u64::MAX));
    }
}
