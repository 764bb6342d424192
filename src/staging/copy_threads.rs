//! Parallel memory copies on a small set of persistent threads.
//!
//! Writes into BAR memory (upload staging on discrete GPUs) scale with threads: on an H200
//! one thread writes 8.7 GB/s, four to eight write 26 to 31 GB/s. Spawning threads per copy
//! would cost tens of microseconds each time, so a pool keeps `threads - 1` workers; the
//! calling thread copies one piece itself.

use std::ptr::NonNull;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// A piece of a copy, sent to a worker.
struct Job {
    src: *const u8,
    dst: *mut u8,
    len: usize,
    latch: Arc<Latch>,
}

// SAFETY: a job's pointers are only dereferenced by the worker that receives it, and the
// thread that sent it waits on the latch until the worker is done, so the memory they point
// to stays valid and unaliased for the whole time (see `CopyThreads::copy_raw`).
unsafe impl Send for Job {}

/// Counts the pieces still running.
struct Latch {
    remaining: Mutex<usize>,
    done: Condvar,
}

impl Latch {
    fn count_down(&self) {
        let mut remaining = self.remaining.lock().unwrap_or_else(|p| p.into_inner());
        *remaining -= 1;
        if *remaining == 0 {
            self.done.notify_all();
        }
    }

    fn wait(&self) {
        let mut remaining = self.remaining.lock().unwrap_or_else(|p| p.into_inner());
        while *remaining > 0 {
            remaining = self.done.wait(remaining).unwrap_or_else(|p| p.into_inner());
        }
    }
}

struct Worker {
    sender: Option<mpsc::Sender<Job>>,
    handle: Option<JoinHandle<()>>,
}

/// The copy threads of one staging pool.
pub(crate) struct CopyThreads {
    workers: Vec<Worker>,
    min_bytes_per_thread: usize,
}

impl CopyThreads {
    /// `threads` copy threads in all, the caller included, and one more thread per
    /// `min_bytes_per_thread` bytes of a copy. A worker that cannot be spawned is left out.
    pub fn new(threads: usize, min_bytes_per_thread: u64) -> CopyThreads {
        let mut workers = Vec::new();
        for index in 1..threads {
            let (sender, receiver) = mpsc::channel::<Job>();
            let spawned = std::thread::Builder::new()
                .name(format!("wgpool-staging-copy-{index}"))
                .spawn(move || {
                    while let Ok(job) = receiver.recv() {
                        // SAFETY: see `Job`; the sender guarantees validity until count_down.
                        unsafe { std::ptr::copy_nonoverlapping(job.src, job.dst, job.len) };
                        job.latch.count_down();
                    }
                });
            if let Ok(handle) = spawned {
                workers.push(Worker {
                    sender: Some(sender),
                    handle: Some(handle),
                });
            }
        }
        CopyThreads {
            workers,
            min_bytes_per_thread: min_bytes_per_thread.max(1) as usize,
        }
    }

    /// Threads a copy of `len` bytes uses.
    pub fn threads_for(&self, len: usize) -> usize {
        (len / self.min_bytes_per_thread).clamp(1, self.workers.len() + 1)
    }

    /// Copies `src` into `dst`, which must have the same length (a shorter side limits
    /// the copy).
    pub fn copy(&self, src: &[u8], dst: &mut [u8]) {
        let len = src.len().min(dst.len());
        // SAFETY: both slices are valid for `len` bytes, do not overlap (one is borrowed
        // mutably), and stay borrowed until `copy_raw` returns.
        unsafe { self.copy_raw(src.as_ptr(), dst.as_mut_ptr(), len) }
    }

    /// Copies `src` into write-only mapped memory, which must be as long (a shorter side
    /// limits the copy). Nothing is read from `dst`.
    pub fn copy_to_write_only(&self, src: &[u8], dst: &mut wgpu::WriteOnly<'_, [u8]>) {
        let len = src.len().min(dst.len());
        let target: NonNull<u8> = dst.as_raw_element_ptr();
        // SAFETY: `WriteOnly` guarantees its pointer is valid for writes of `dst.len()` bytes
        // and not otherwise accessed while it is borrowed, which it is (mutably) until we
        // return; `src` is a distinct, shared borrow.
        unsafe { self.copy_raw(src.as_ptr(), target.as_ptr(), len) }
    }

    /// # Safety
    ///
    /// `src` must be valid for reads and `dst` for writes of `len` bytes, the ranges must not
    /// overlap, and nothing else may access `dst` until this returns.
    unsafe fn copy_raw(&self, src: *const u8, dst: *mut u8, len: usize) {
        let threads = self.threads_for(len);
        if threads == 1 {
            // SAFETY: the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
            return;
        }
        // Pieces of whole 4 KiB pages, so that no two threads write into one page.
        let piece = len.div_ceil(threads).div_ceil(4096) * 4096;
        let pieces: Vec<(usize, usize)> = (0..threads)
            .map(|i| (i * piece, ((i + 1) * piece).min(len)))
            .filter(|(start, end)| start < end)
            .collect();
        let latch = Arc::new(Latch {
            remaining: Mutex::new(pieces.len() - 1),
            done: Condvar::new(),
        });
        for (worker, &(start, end)) in self.workers.iter().zip(&pieces[1..]) {
            // SAFETY: `start..end` lies inside `0..len`.
            let job = unsafe {
                Job {
                    src: src.add(start),
                    dst: dst.add(start),
                    len: end - start,
                    latch: latch.clone(),
                }
            };
            let sent = match &worker.sender {
                Some(sender) => sender.send(job),
                None => Err(mpsc::SendError(job)),
            };
            if let Err(mpsc::SendError(job)) = sent {
                // The worker is gone: copy its piece here.
                // SAFETY: as for the worker.
                unsafe { std::ptr::copy_nonoverlapping(job.src, job.dst, job.len) };
                job.latch.count_down();
            }
        }
        let (start, end) = pieces[0];
        // SAFETY: the caller's contract, for the first piece.
        unsafe { std::ptr::copy_nonoverlapping(src.add(start), dst.add(start), end - start) };
        // Nothing may return before every worker has finished with the memory.
        latch.wait();
    }
}

impl Drop for CopyThreads {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            worker.sender.take();
        }
        for worker in &mut self.workers {
            if let Some(handle) = worker.handle.take() {
                let _ = handle.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_copies_are_exact() {
        let threads = CopyThreads::new(4, 4096);
        for len in [
            0,
            1,
            4095,
            4096,
            4097,
            3 * 4096 + 5,
            1 << 20,
            (1 << 20) + 13,
        ] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut dst = vec![0u8; len];
            threads.copy(&src, &mut dst);
            assert_eq!(src, dst, "len {len}");
            let mut write_only = vec![0u8; len];
            threads.copy_to_write_only(&src, &mut wgpu::WriteOnly::from_mut(&mut write_only[..]));
            assert_eq!(src, write_only, "len {len}");
        }
    }

    #[test]
    fn small_copies_use_one_thread() {
        let threads = CopyThreads::new(8, 1 << 20);
        assert_eq!(threads.threads_for(100), 1);
        assert_eq!(threads.threads_for((2 << 20) - 1), 1);
        assert_eq!(threads.threads_for(4 << 20), 4);
        assert_eq!(threads.threads_for(1 << 30), 8);
    }
}
