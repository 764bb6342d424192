//! Memory over a live pool's history: the curves of [`MemorySample`]s rebuilt from its
//! events, with the bytes a pool with residency holds in host memory for evicted blocks.

use std::collections::BTreeMap;

use super::{Action, EVICTED, History, MemorySample, RESTORED};

/// Memory over a recorded history, one sample per bucket of events.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Timeline {
    /// The samples; `op` is the index of the bucket's first event.
    pub samples: Vec<MemorySample>,
    /// Events covered.
    pub events: u64,
    /// The highest reserved bytes (segments plus mapped pages), and the event where it was
    /// first reached.
    pub peak_reserved: (u64, u64),
}

impl Timeline {
    /// Rebuilds the curves from `history`'s events, keeping at most `max_samples` points
    /// (each the highest values of its bucket of events).
    ///
    /// - `live`: requested bytes of blocks allocated and not freed;
    /// - `reserved`: bytes of segments created and not released, plus mapped pages;
    /// - `mapped`: bytes of pages mapped and not unmapped;
    /// - `evicted`: bytes of pages unmapped by eviction ([`EVICTED`]) and not restored
    ///   ([`RESTORED`]) or freed with their block;
    /// - `allocated` stays 0: events carry requested sizes, not block sizes.
    ///
    /// Events the history dropped (it is bounded) are not counted: the curves then start
    /// from the oldest kept event, as if memory were empty before it.
    pub fn of(history: &History, max_samples: usize) -> Timeline {
        let events = history.len() as u64;
        let bucket = events.div_ceil(max_samples.max(1) as u64).max(1);
        let mut timeline = Timeline {
            events,
            ..Timeline::default()
        };
        let (mut live, mut segments, mut mapped, mut evicted) = (0u64, 0u64, 0u64, 0u64);
        // Evicted runs by address, so a freed block's runs leave the curve with it.
        let mut evicted_runs: BTreeMap<u64, u64> = BTreeMap::new();
        for (index, event) in history.events().enumerate() {
            let index = index as u64;
            let label = event.label.as_deref();
            let mut allocs = 0;
            let mut frees = 0;
            match event.action {
                Action::Alloc => live += event.size,
                Action::FreeCompleted => {
                    live = live.saturating_sub(event.size);
                    let end = event.addr + event.size.max(1);
                    let gone: Vec<u64> = evicted_runs
                        .range(event.addr..end)
                        .map(|(addr, _)| *addr)
                        .collect();
                    for addr in gone {
                        let size = evicted_runs.remove(&addr).unwrap_or(0);
                        evicted = evicted.saturating_sub(size);
                    }
                }
                Action::SegmentAlloc => {
                    segments += event.size;
                    allocs = 1;
                }
                Action::SegmentFree => {
                    segments = segments.saturating_sub(event.size);
                    frees = 1;
                }
                Action::SegmentMap => {
                    mapped += event.size;
                    allocs = 1;
                    if label == Some(RESTORED)
                        && let Some(size) = evicted_runs.remove(&event.addr)
                    {
                        evicted = evicted.saturating_sub(size);
                    }
                }
                Action::SegmentUnmap => {
                    mapped = mapped.saturating_sub(event.size);
                    frees = 1;
                    if label == Some(EVICTED) {
                        *evicted_runs.entry(event.addr).or_default() += event.size;
                        evicted += event.size;
                    }
                }
                Action::Oom => {}
            }
            let reserved = segments + mapped;
            if reserved > timeline.peak_reserved.0 {
                timeline.peak_reserved = (reserved, index);
            }
            let start = index / bucket * bucket;
            if timeline.samples.last().is_none_or(|s| s.op != start) {
                timeline.samples.push(MemorySample {
                    op: start,
                    ..MemorySample::default()
                });
            }
            let sample = timeline.samples.last_mut().expect("just pushed");
            sample.live = sample.live.max(live);
            sample.reserved = sample.reserved.max(reserved);
            sample.mapped = sample.mapped.max(mapped);
            sample.evicted = sample.evicted.max(evicted);
            sample.device_allocs += allocs;
            sample.device_frees += frees;
        }
        timeline
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::history::Event;

    fn labelled(action: Action, addr: u64, size: u64, label: &str) -> Event {
        Event {
            label: Some(Arc::from(label)),
            ..Event::new(action, addr, size, 0, 0)
        }
    }

    #[test]
    fn evicted_bytes_rise_on_eviction_and_fall_on_restore_and_free() {
        let mut history = History::with_capacity(64);
        let mb = 1u64 << 20;
        for event in [
            Event::new(Action::SegmentMap, 0, 8 * mb, 0, 0),
            Event::new(Action::Alloc, 0, 4 * mb, 0, 0),
            Event::new(Action::Alloc, 4 * mb, 4 * mb, 0, 0),
            labelled(Action::SegmentUnmap, mb, 2 * mb, EVICTED),
            labelled(Action::SegmentUnmap, 5 * mb, 2 * mb, EVICTED),
            // An unmap that is not an eviction (a cache release) leaves `evicted` alone.
            Event::new(Action::SegmentUnmap, 3 * mb, mb, 0, 0),
            labelled(Action::SegmentMap, mb, 2 * mb, RESTORED),
            Event::new(Action::FreeCompleted, 4 * mb, 4 * mb, 0, 0),
        ] {
            history.record(event);
        }
        let timeline = Timeline::of(&history, 100);
        let evicted: Vec<u64> = timeline.samples.iter().map(|s| s.evicted / mb).collect();
        assert_eq!(evicted, [0, 0, 0, 2, 4, 4, 2, 0]);
        let mapped: Vec<u64> = timeline.samples.iter().map(|s| s.mapped / mb).collect();
        assert_eq!(mapped, [8, 8, 8, 6, 4, 3, 5, 5]);
        assert_eq!(timeline.peak_reserved, (8 * mb, 0));
        assert_eq!(timeline.samples[7].live, 4 * mb);
        assert_eq!(
            timeline.samples.iter().map(|s| s.device_frees).sum::<u32>(),
            3
        );
    }

    #[test]
    fn long_histories_keep_the_highest_value_of_each_bucket() {
        let mut history = History::with_capacity(1000);
        for i in 0..1000u64 {
            let action = if i % 2 == 0 {
                Action::Alloc
            } else {
                Action::FreeCompleted
            };
            history.record(Event::new(action, i * 4096, 4096, 0, i));
        }
        let timeline = Timeline::of(&history, 10);
        assert_eq!(timeline.samples.len(), 10);
        assert!(timeline.samples.iter().all(|s| s.live == 4096));
        assert_eq!(timeline.events, 1000);
    }
}
