//! The bounded event store.

use std::collections::VecDeque;

use super::Event;

/// The last `capacity` events, oldest first. Recording past the capacity drops the oldest
/// event (as PyTorch's `max_entries` does) and counts it in [`dropped`](History::dropped).
#[derive(Debug, Clone, Default)]
pub struct History {
    events: VecDeque<Event>,
    capacity: usize,
    dropped: u64,
}

impl History {
    /// An empty history that keeps at most `capacity` events (0 keeps none).
    pub fn with_capacity(capacity: usize) -> History {
        History {
            events: VecDeque::with_capacity(capacity.min(1 << 16)),
            capacity,
            dropped: 0,
        }
    }

    /// Appends `event`, dropping the oldest one when full.
    pub fn record(&mut self, event: Event) {
        if self.capacity == 0 {
            self.dropped += 1;
            return;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
            self.dropped += 1;
        }
        self.events.push_back(event);
    }

    /// The kept events, oldest first.
    pub fn events(&self) -> impl ExactSizeIterator<Item = &Event> + '_ {
        self.events.iter()
    }

    /// How many events are kept.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no event is kept.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// How many events were dropped to respect the capacity.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The most events kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}
