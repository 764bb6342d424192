//! The miss path: garbage collection, new segments, and releasing cached blocks
//! (PyTorch's `garbage_collect_cached_blocks`, `alloc_block`,
//! `release_available_cached_blocks` and `release_cached_blocks`).

use super::error::{AllocError, OutOfMemory};
use super::{Engine, SegmentKind, SegmentSource};
use crate::config::Policy;

impl Engine {
    /// Finds or makes a free block for a request that missed the pool, or fails with
    /// out-of-memory after the whole retry chain.
    pub(super) fn serve_miss<S: SegmentSource + ?Sized>(
        &mut self,
        pool: SegmentKind,
        stream: u32,
        requested: u64,
        rounded: u64,
        source: &mut S,
    ) -> Result<u32, AllocError> {
        if self.gc_active() {
            self.garbage_collect(source);
        }
        let segment_size = self.new_segment_size(stream, rounded);
        if self.config.policy == Policy::Compact {
            super::compact::make_room(self, rounded, segment_size, source);
        }
        if let Ok(block) = self.create_segment(segment_size, pool, stream, source) {
            return Ok(block);
        }
        if self.release_available_cached_blocks(pool, stream, rounded, source) {
            if let Ok(block) = self.create_segment(segment_size, pool, stream, source) {
                return Ok(block);
            }
        }
        self.release_cached_blocks(source);
        self.stats.num_alloc_retries += 1;
        let cause = match self.create_segment(segment_size, pool, stream, source) {
            Ok(block) => return Ok(block),
            Err(cause) => cause,
        };
        self.stats.num_ooms += 1;
        Err(AllocError::OutOfMemory(OutOfMemory {
            requested,
            rounded,
            segment_size,
            pool,
            cap: self.cap,
            allocated: self.stats.allocated_bytes.all.current,
            reserved: self.stats.reserved_bytes.all.current,
            host_overflow: None,
            cause,
        }))
    }

    /// Releases cached unsplit large blocks, oldest first, while reserved memory is above
    /// `garbage_collection_threshold` times the cap.
    fn garbage_collect<S: SegmentSource + ?Sized>(&mut self, source: &mut S) {
        let (Some(cap), Some(threshold)) = (self.cap, self.config.garbage_collection_threshold)
        else {
            return;
        };
        let gc_threshold = (threshold * cap as f64) as u64;
        let reserved = self.stats.reserved_bytes.all.current;
        if reserved <= gc_threshold {
            return;
        }
        let target = reserved - gc_threshold;
        let large = SegmentKind::Large.index();
        let now = self.search_count[large];
        // Ages are fixed during one collection: no searches happen inside it.
        let mut candidates: Vec<(u32, u64, u64)> = self
            .idle_blocks()
            .filter(|&(_, _, pool)| pool == SegmentKind::Large)
            .map(|(block, size, _)| (block, size, now - self.cold[block as usize].gc_base))
            .collect();
        let mut total_age: u64 = candidates.iter().map(|c| c.2).sum();
        let mut reclaimed = 0u64;
        let mut freed_any = true;
        while reclaimed < target && freed_any && !candidates.is_empty() {
            let threshold_age = total_age as f64 / candidates.len() as f64;
            freed_any = false;
            let mut kept = Vec::with_capacity(candidates.len());
            for (block, size, age) in candidates {
                if age as f64 >= threshold_age {
                    freed_any = true;
                    reclaimed += size;
                    total_age -= age;
                    self.release_block(block, source);
                } else {
                    kept.push((block, size, age));
                }
            }
            candidates = kept;
        }
    }

    /// With `max_split_size` set: releases one cached oversize block that covers the request,
    /// or else the largest oversize blocks until their total covers it. Returns whether
    /// enough was released.
    fn release_available_cached_blocks<S: SegmentSource + ?Sized>(
        &mut self,
        pool: SegmentKind,
        stream: u32,
        rounded: u64,
        source: &mut S,
    ) -> bool {
        let Some(max_split) = self.config.max_split_size else {
            return false;
        };
        let wanted = rounded.max(max_split);
        let index = &self.free_index[pool.index()];
        let covering = index
            .fits_ascending(stream, wanted)
            .find(|k| !self.is_split(k.block));
        if let Some(key) = covering {
            self.release_block(key.block, source);
            return true;
        }
        let victims: Vec<(u32, u64)> = index
            .below_descending(stream, wanted)
            .take_while(|k| k.size >= max_split)
            .filter(|k| !self.is_split(k.block))
            .scan(0u64, |released, k| {
                if *released >= wanted {
                    return None;
                }
                *released += k.size;
                Some((k.block, k.size))
            })
            .collect();
        let released: u64 = victims.iter().map(|v| v.1).sum();
        for (block, _) in victims {
            self.release_block(block, source);
        }
        released >= wanted
    }

    /// Releases every free block that spans a whole segment, in both pools.
    pub(super) fn release_cached_blocks<S: SegmentSource + ?Sized>(&mut self, source: &mut S) {
        let whole: Vec<u32> = self.idle_blocks().map(|(block, _, _)| block).collect();
        for block in whole {
            self.release_block(block, source);
        }
    }
}
