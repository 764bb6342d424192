//! The miss path: garbage collection, new segments, and releasing cached blocks
//! (PyTorch's `garbage_collect_cached_blocks`, `alloc_block`,
//! `release_available_cached_blocks` and `release_cached_blocks`).

use super::error::{AllocError, OomCause, OutOfMemory};
use super::policy::Request;
use super::rounding::SegmentKind;
use super::segments::NoSegment;
use super::source::SegmentSource;
use super::state::EngineState;

/// What one attempt to create a segment gave: the new block, or a reason to go on down the
/// chain, or an error that ends it.
enum Attempt {
    Created(u32),
    OutOfMemory(OomCause),
}

impl EngineState {
    /// One attempt to create a segment. A source error other than out-of-memory ends the
    /// chain at once, with nothing released or counted.
    fn attempt(
        &mut self,
        size: u64,
        kind: SegmentKind,
        stream: u32,
        source: &mut dyn SegmentSource,
    ) -> Result<Attempt, AllocError> {
        match self.create_segment(size, kind, stream, source) {
            Ok(block) => Ok(Attempt::Created(block)),
            Err(failure) => Self::classify(failure).map(Attempt::OutOfMemory),
        }
    }

    /// Makes a free block for a request that missed the cache, with a new segment of
    /// `segment_size` bytes (bounded by the largest segment), or fails with out-of-memory
    /// after the whole retry chain. `make_room` runs before the first attempt (the compact
    /// policy releases idle segments there). Only out-of-memory (the cap, or the source
    /// saying so) goes down the chain.
    pub(crate) fn grow_segments(
        &mut self,
        request: Request,
        segment_size: u64,
        source: &mut dyn SegmentSource,
        make_room: &mut dyn FnMut(&mut EngineState, u64, &mut dyn SegmentSource),
    ) -> Result<u32, AllocError> {
        let Request {
            kind,
            stream,
            rounded,
            ..
        } = request;
        if self.gc_active() {
            self.garbage_collect(source);
        }
        let segment_size = segment_size.min(self.max_segment_size);
        make_room(self, segment_size, source);
        if let Attempt::Created(block) = self.attempt(segment_size, kind, stream, source)? {
            return Ok(block);
        }
        if self.release_available_cached_blocks(kind, stream, rounded, source) {
            if let Attempt::Created(block) = self.attempt(segment_size, kind, stream, source)? {
                return Ok(block);
            }
        }
        self.release_cached_blocks(source);
        self.stats.num_alloc_retries += 1;
        let cause = match self.attempt(segment_size, kind, stream, source)? {
            Attempt::Created(block) => return Ok(block),
            Attempt::OutOfMemory(cause) => cause,
        };
        Err(self.out_of_memory(request, segment_size, cause))
    }

    /// Counts an out-of-memory and describes it.
    pub(crate) fn out_of_memory(
        &mut self,
        request: Request,
        segment_size: u64,
        cause: OomCause,
    ) -> AllocError {
        self.stats.num_ooms += 1;
        AllocError::OutOfMemory(Box::new(OutOfMemory {
            requested: request.requested,
            rounded: request.rounded,
            segment_size,
            kind: request.kind,
            cap: self.cap,
            allocated: self.stats.allocated_bytes.all.current,
            reserved: self.physical(),
            host_overflow: None,
            held_for_submission: None,
            cause,
            residency: None,
        }))
    }

    /// Turns a failure to create memory into the error that ends the request, or the cause
    /// that sends it further down the retry chain.
    pub(crate) fn classify(failure: NoSegment) -> Result<OomCause, AllocError> {
        match failure {
            NoSegment::Cap => Ok(OomCause::Cap),
            NoSegment::Source(error) if error.is_out_of_memory() => Ok(OomCause::Device(error)),
            NoSegment::Source(error) => Err(AllocError::Source(error)),
        }
    }

    /// Releases cached unsplit large blocks, oldest first, while reserved memory is above
    /// `garbage_collection_threshold` times the cap.
    fn garbage_collect(&mut self, source: &mut dyn SegmentSource) {
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
            .idle_segment_blocks()
            .filter(|idle| idle.kind == SegmentKind::Large)
            .map(|idle| {
                let age = now - self.cold[idle.block as usize].gc_base;
                (idle.block, idle.size, age)
            })
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
    fn release_available_cached_blocks(
        &mut self,
        kind: SegmentKind,
        stream: u32,
        rounded: u64,
        source: &mut dyn SegmentSource,
    ) -> bool {
        let Some(max_split) = self.config.max_split_size else {
            return false;
        };
        let wanted = rounded.max(max_split);
        let index = &self.free_index[kind.index()];
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
    pub(super) fn release_cached_blocks(&mut self, source: &mut dyn SegmentSource) {
        self.stats.num_sync_all_streams += 1;
        let whole: Vec<u32> = self.idle_segment_blocks().map(|idle| idle.block).collect();
        for block in whole {
            self.release_block(block, source);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use crate::config::Config;
    use crate::engine::{
        AllocError, Engine, EngineLimits, OomCause, SegmentId, SegmentKind, SegmentSource,
        SourceError, SourceErrorKind, VirtualSegments,
    };

    /// A device that fails every segment creation from the `fail_from`-th on, with an error
    /// of the given kind, and counts the attempts.
    struct FailingSource {
        inner: VirtualSegments,
        fail_from: u64,
        kind: SourceErrorKind,
        attempts: u64,
    }

    impl SegmentSource for FailingSource {
        fn create_segment(
            &mut self,
            id: SegmentId,
            size: u64,
            kind: SegmentKind,
        ) -> Result<(), SourceError> {
            self.attempts += 1;
            if self.attempts >= self.fail_from {
                let message = "buffer usage STORAGE | MAP_READ is not allowed";
                return Err(match self.kind {
                    SourceErrorKind::OutOfMemory => SourceError::out_of_memory(message),
                    _ => SourceError::other(message),
                });
            }
            self.inner.create_segment(id, size, kind)
        }

        fn release_segment(&mut self, id: SegmentId, size: u64) {
            self.inner.release_segment(id, size);
        }
    }

    fn engine_with_a_cached_segment(kind: SourceErrorKind) -> (Engine, FailingSource) {
        let mut engine = Engine::new(
            Config::parse("policy:pytorch").unwrap(),
            EngineLimits::unlimited(),
        )
        .unwrap();
        let mut source = FailingSource {
            inner: VirtualSegments::unlimited(),
            fail_from: 2,
            kind,
            attempts: 0,
        };
        let a = engine.allocate(3 << 20, 0, &mut source).unwrap();
        engine.free(a.block, &mut source).unwrap();
        assert_eq!(engine.memory_stats().reserved_bytes.all.current, 20 << 20);
        (engine, source)
    }

    /// A source error other than out-of-memory (a validation error, say) comes back as
    /// itself: no cached segment released, no retry, no OOM counted.
    #[test]
    fn a_non_oom_source_error_skips_the_retry_chain() {
        let (mut engine, mut source) = engine_with_a_cached_segment(SourceErrorKind::Other);
        let error = engine.allocate(30 << 20, 0, &mut source).unwrap_err();
        let AllocError::Source(source_error) = &error else {
            panic!("expected AllocError::Source, got {error:?}");
        };
        assert_eq!(source_error.kind(), SourceErrorKind::Other);
        assert_eq!(
            error.source().map(|e| e.to_string()),
            Some(source_error.to_string())
        );
        assert_eq!(
            source_error.source().map(|e| e.to_string()).as_deref(),
            Some("buffer usage STORAGE | MAP_READ is not allowed")
        );
        assert!(error.to_string().contains("MAP_READ"), "{error}");
        assert_eq!(source.attempts, 2, "one attempt, not retried");
        let stats = engine.memory_stats();
        assert_eq!(stats.reserved_bytes.all.current, 20 << 20, "cache kept");
        assert_eq!((stats.num_alloc_retries, stats.num_ooms), (0, 0));
        assert_eq!(source.inner.released, 0);
        engine.check_invariants().unwrap();
    }

    /// The same failure reported as out-of-memory goes down the whole chain.
    #[test]
    fn an_oom_source_error_releases_the_cache_and_retries() {
        let (mut engine, mut source) = engine_with_a_cached_segment(SourceErrorKind::OutOfMemory);
        let error = engine.allocate(30 << 20, 0, &mut source).unwrap_err();
        let AllocError::OutOfMemory(oom) = &error else {
            panic!("expected AllocError::OutOfMemory, got {error:?}");
        };
        assert!(matches!(&oom.cause, OomCause::Device(e) if e.is_out_of_memory()));
        assert!(error.source().is_some());
        assert_eq!(source.attempts, 3, "tried, then retried after the release");
        let stats = engine.memory_stats();
        assert_eq!(stats.reserved_bytes.all.current, 0, "cache released");
        assert_eq!((stats.num_alloc_retries, stats.num_ooms), (1, 1));
        engine.check_invariants().unwrap();
    }
}
