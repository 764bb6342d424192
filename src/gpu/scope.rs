//! Running device work under wgpu error scopes, so that an error is returned to the caller
//! instead of reaching the uncaptured-error handler.

use super::error_log::error_text;

/// A wgpu error caught by [`catch`].
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaughtError {
    /// The device ran out of memory.
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
    /// wgpu rejected the call as invalid.
    #[error("wgpu validation error: {0}")]
    Validation(String),
    /// The driver or wgpu failed internally.
    #[error("wgpu internal error: {0}")]
    Internal(String),
}

impl CaughtError {
    fn from_wgpu(error: &wgpu::Error) -> CaughtError {
        let text = error_text(error);
        match error {
            wgpu::Error::OutOfMemory { .. } => CaughtError::OutOfMemory(text),
            wgpu::Error::Validation { .. } => CaughtError::Validation(text),
            wgpu::Error::Internal { .. } => CaughtError::Internal(text),
        }
    }
}

/// Runs `work` with out-of-memory, validation and internal error scopes pushed on this
/// thread, and returns its value, or the first error any of the scopes caught.
///
/// Guarantee: no error raised by `work` on this thread reaches the uncaptured-error
/// handler. Errors raised later (for example when the GPU executes a submission) are not
/// covered; they surface at the next `submit` or `poll` inside a scope or go to the handler.
pub fn catch<T>(device: &wgpu::Device, work: impl FnOnce() -> T) -> Result<T, CaughtError> {
    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let out_of_memory = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let value = work();
    // Scopes pop in reverse order of pushing.
    let validation = pollster::block_on(validation.pop());
    let out_of_memory = pollster::block_on(out_of_memory.pop());
    let internal = pollster::block_on(internal.pop());
    match out_of_memory.or(validation).or(internal) {
        Some(error) => Err(CaughtError::from_wgpu(&error)),
        None => Ok(value),
    }
}

crate::error_debug::debug_as_message!(CaughtError);
