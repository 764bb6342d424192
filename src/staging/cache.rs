//! The cache of idle staging buffers, by kind and size class.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::host_buffer::{HostBuffer, Kind};
use super::stats::Counters;

/// Idle staging buffers, ready for their next use.
///
/// Guarantee: a buffer enters the cache only from a holder that knows the GPU work that used
/// it has completed (a map callback fired for it, or it was never submitted), so handing it
/// out can never expose memory a transfer in flight still reads or writes. The cache itself
/// never calls into wgpu, so its lock may be taken inside map callbacks.
pub(crate) struct Cache {
    lists: Mutex<HashMap<(Kind, u64), Vec<HostBuffer>>>,
    counters: Arc<Counters>,
    max_cached_bytes: Option<u64>,
}

impl Cache {
    pub fn new(counters: Arc<Counters>, max_cached_bytes: Option<u64>) -> Cache {
        Cache {
            lists: Mutex::new(HashMap::new()),
            counters,
            max_cached_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(Kind, u64), Vec<HostBuffer>>> {
        // The lists are consistent after every operation; a panic elsewhere cannot leave them
        // half-updated.
        self.lists
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A cached buffer of this kind and class, counted as a reuse.
    pub fn take(&self, kind: Kind, class: u64) -> Option<HostBuffer> {
        let buffer = self.lock().get_mut(&(kind, class))?.pop()?;
        let counters = kind.counters(&self.counters);
        counters.uncached(class);
        counters.reused();
        Some(buffer)
    }

    /// Takes an idle buffer back. Beyond `max_cached_bytes` it is destroyed instead (outside
    /// the lock).
    pub fn put(&self, buffer: HostBuffer) {
        let kind = buffer.kind();
        let class = buffer.class();
        let counters = kind.counters(&self.counters);
        let mut lists = self.lock();
        if let Some(limit) = self.max_cached_bytes {
            let cached =
                self.counters.upload.cached_bytes() + self.counters.download.cached_bytes();
            if cached + class > limit {
                drop(lists);
                drop(buffer);
                return;
            }
        }
        counters.cached(class);
        lists.entry((kind, class)).or_default().push(buffer);
    }

    /// Removes every cached buffer and returns them, to be destroyed outside the lock.
    pub fn drain(&self) -> Vec<HostBuffer> {
        let mut lists = self.lock();
        let mut out = Vec::new();
        for ((kind, class), list) in lists.iter_mut() {
            for buffer in list.drain(..) {
                kind.counters(&self.counters).uncached(*class);
                out.push(buffer);
            }
        }
        lists.clear();
        out
    }
}
