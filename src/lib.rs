//! wgpool: a cross-vendor GPU memory pool on wgpu, with the semantics of PyTorch's CUDA
//! caching allocator.
//!
//! - [`engine`]: the placement engine. Pure Rust, no wgpu: it carves abstract segments into
//!   blocks and keeps PyTorch's statistics.
//! - [`config`]: `WGPOOL_CONF`, in `PYTORCH_CUDA_ALLOC_CONF` syntax.
//! - [`trace`]: trace parsing and replay through the engine.

pub mod bench;
pub mod config;
pub mod engine;
pub mod format;
pub mod gpu;
pub mod kernels;
pub mod pool;
pub mod staging;
pub mod trace;

/// The README's Rust examples, compiled as doc tests so that they cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
