//! Submission points: when blocks dropped while recorded commands may name them are freed.
//!
//! wgpu runs work in submission order. A block whose binding was recorded into an encoder
//! that is not submitted yet must not be handed out again: work for the new owner (a
//! [`Pool::write`], another encoder) could be submitted first and change the bytes the
//! recorded commands read. Under [`FreeTiming::AfterSubmit`](super::FreeTiming) (the
//! default) such a block is held back when dropped, and freed at the next submission point:
//! [`Pool::submit`] or [`Pool::mark_submitted`].

use super::Pool;

impl Pool {
    /// Submits `command_buffers` on the pool's queue, then frees the blocks held back until a
    /// submission point. Use it in place of `queue.submit` for commands that use pool blocks.
    ///
    /// A submission point declares that every command recorded so far that names this pool's
    /// blocks, on any thread, is now submitted. With several threads recording, submit
    /// through one place, or call it only once all of them have submitted.
    pub fn submit<I>(&self, command_buffers: I) -> wgpu::SubmissionIndex
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
    {
        let index = self.shared.queue.submit(command_buffers);
        self.shared.submission_point();
        index
    }

    /// A submission point without submitting: call it after your own `queue.submit` (or
    /// after [`Kernels::run`](crate::kernels::Kernels::run), which submits), when every
    /// command recorded so far that names this pool's blocks has been submitted. Blocks held
    /// back until now are freed, and blocks exposed before now return at once when dropped.
    pub fn mark_submitted(&self) {
        self.shared.submission_point();
    }
}
