//! Submission points through a pool handle: when blocks dropped while recorded commands may
//! name them are freed (see [`FreeTiming`](super::FreeTiming) for the rule with threads).

use super::Pool;
use super::submissions::Recording;

impl Pool {
    /// Submits `command_buffers` on the pool's queue, then reaches a submission point for the
    /// calling thread: the commands it recorded so far are submitted. Blocks of any pool on
    /// the device that were held back only for them are freed. Use it in place of
    /// `queue.submit` for commands that use pool blocks.
    ///
    /// Other threads' recordings are not affected: a block one of them exposed stays held
    /// back until that thread reaches its own submission point.
    pub fn submit<I>(&self, command_buffers: I) -> wgpu::SubmissionIndex
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
    {
        let index = self.shared.queue.submit(command_buffers);
        self.shared.submissions.thread_submitted();
        index
    }

    /// A submission point for the calling thread without submitting: call it after your own
    /// `queue.submit` (or after `kernels::Kernels::run`, which
    /// submits), once every command this thread recorded so far is submitted. Covers every
    /// pool on the device, like [`mark_submitted`](super::mark_submitted)`(&device)`.
    pub fn mark_submitted(&self) {
        self.shared.submissions.thread_submitted();
    }

    /// A submission point for every thread: every command recorded so far that names a block
    /// of any pool on the device, on any thread, is submitted. For an application whose
    /// threads record and one thread submits everything; calling it while another thread's
    /// commands are still unsubmitted lets their blocks be reused too early.
    pub fn mark_all_submitted(&self) {
        self.shared.submissions.all_submitted();
    }

    /// Takes the calling thread's open recording away from the thread, to hand it to the
    /// thread that submits its command buffers: the blocks it exposed stay held back until
    /// the returned [`Recording`] is dropped, and this thread's next exposure opens a new
    /// recording. Drop the token once those command buffers are submitted.
    pub fn take_recording(&self) -> Recording {
        Recording::detach(&self.shared.submissions)
    }
}
