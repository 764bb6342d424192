//! Turning allocations and frees named by ids (or addresses) into a [`Trace`] of dense slots,
//! with the checks every input format shares.

use std::collections::HashMap;

use super::{Trace, TraceFormat, TraceOp};

/// Builds a [`Trace`] one operation at a time.
pub(crate) struct TraceBuilder {
    trace: Trace,
    live: HashMap<u64, u32>,
    free_slots: Vec<u32>,
    /// Traces may name streams by their handles (pointers); the engine wants small numbers.
    streams: HashMap<u64, u32>,
}

impl TraceBuilder {
    pub fn new(format: TraceFormat) -> TraceBuilder {
        TraceBuilder {
            trace: Trace {
                format,
                ..Trace::default()
            },
            live: HashMap::new(),
            free_slots: Vec::new(),
            streams: HashMap::new(),
        }
    }

    /// Allocates `size` bytes under `id` on `stream`; `position` is where the input says so.
    pub fn alloc(
        &mut self,
        id: u64,
        size: u64,
        stream: u64,
        position: usize,
    ) -> Result<(), String> {
        if self.live.contains_key(&id) {
            return Err(format!("id {id} is allocated again while still live"));
        }
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(self.trace.slots)
                    .map_err(|_| "more than 4294967295 allocations live at once".to_string())?;
                self.trace.slots += 1;
                slot
            }
        };
        self.live.insert(id, slot);
        let stream = self.stream_number(stream);
        self.push(TraceOp::Alloc { slot, size, stream }, id, position);
        Ok(())
    }

    /// An allocation of `size` bytes on `stream` that the recording allocator refused; replay
    /// attempts it and expects out-of-memory.
    pub fn refused(&mut self, size: u64, stream: u64, position: usize) {
        let stream = self.stream_number(stream);
        self.push(TraceOp::Refused { size, stream }, 0, position);
    }

    fn stream_number(&mut self, stream: u64) -> u32 {
        let next = self.streams.len() as u32;
        *self.streams.entry(stream).or_insert(next)
    }

    /// Frees the allocation under `id`.
    pub fn free(&mut self, id: u64, position: usize) -> Result<(), String> {
        let Some(slot) = self.live.remove(&id) else {
            return Err(format!("free of id {id}, which is not live"));
        };
        self.free_slots.push(slot);
        self.push(TraceOp::Free { slot }, id, position);
        Ok(())
    }

    fn push(&mut self, op: TraceOp, id: u64, position: usize) {
        self.trace.ops.push(op);
        self.trace.ids.push(id);
        self.trace.positions.push(position);
    }

    /// Counts an allocation the input records as failed (it holds no memory).
    pub fn failed_alloc(&mut self) {
        self.trace.failed_allocs += 1;
    }

    /// Counts an allocation made before the input's first event.
    pub fn pre_existing(&mut self) {
        self.trace.pre_existing += 1;
    }

    pub fn finish(self) -> Trace {
        self.trace
    }
}
