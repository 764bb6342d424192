#![warn(missing_docs)]
#![warn(clippy::unwrap_used)]
#![deny(unsafe_code)]
//! wgpool: a cross-vendor GPU memory pool on [wgpu](https://wgpu.rs), with the semantics of
//! PyTorch's CUDA caching allocator.
//!
//! # Start here: [`Pool`](pool::Pool)
//!
//! A [`Pool`](pool::Pool) hands out [`Block`](pool::Block)s: 512 B-aligned ranges of large
//! segment buffers that return to the pool's cache when dropped. Open one on your own device
//! with [`Pool::new`](pool::Pool::new), or on a headless device with
//! [`GpuContext::headless`](gpu::GpuContext::headless) and
//! [`Pool::from_context`](pool::Pool::from_context):
//!
//! ```no_run
//! use wgpool::config::Config;
//! use wgpool::gpu::{GpuContext, HeadlessOptions};
//! use wgpool::pool::{BlockBindings, Pool};
//!
//! let gpu = GpuContext::headless(&HeadlessOptions::default())?;
//! let pool = Pool::from_context(&gpu, Config::from_env()?)?; // WGPOOL_CONF
//! let x = pool.alloc(4096)?;
//! pool.write(&x, &[1u8; 4096])?;
//! let bindings = BlockBindings::new().read_write(0, &x); // layouts and bind groups
//! # let mut encoder = gpu.device().create_command_encoder(&Default::default());
//! // ... record kernels that bind `x` into `encoder` ...
//! drop(x); // held back until the recorded work is submitted:
//! pool.submit([encoder.finish()]); // now its memory may serve the next request
//! println!("{} bytes allocated, {} reserved", pool.memory_allocated(), pool.memory_reserved());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The rule to know: submit the commands that use a block through
//! [`Pool::submit`](pool::Pool::submit) (or call
//! [`Pool::mark_submitted`](pool::Pool::mark_submitted) after your own `queue.submit`); see
//! [`FreeTiming`](pool::FreeTiming). Bind pool blocks as `var<storage, read_write>`, or keep
//! read-only inputs in a pool of their own; see [`BlockBindings`](pool::BlockBindings).
//!
//! # Map of the crate
//!
//! Modules are built in floors, bottom first; each names only modules on floors below its own
//! (docs/DESIGN-NOTES.md, "The floors").
//!
//! | module | what it is | stability |
//! | --- | --- | --- |
//! | [`format`](mod@format) | byte counts and escaped text for messages | stable |
//! | [`config`] | `WGPOOL_CONF` (PyTorch's `PYTORCH_CUDA_ALLOC_CONF` syntax) and its option table | stable |
//! | [`gpu`] | opening a headless device, adapter facts and memory heaps, error scopes, and the Vulkan page-mapping driver (`gpu::sparse`) | stable, except `sparse`, which is new |
//! | [`engine`] | the placement engine: segments carved into blocks, PyTorch's policy and statistics; pure Rust, no wgpu. Memory comes from a [`SegmentSource`](engine::SegmentSource) | stable |
//! | [`history`] | the event log of a pool or a replay, PyTorch snapshot pickles, timelines | stable |
//! | [`memory`] | where segments and pages meet wgpu: the memory mode decided once, fixed segments, address ranges in pages mode as a source ([`PagedSource`](memory::PagedSource)), the host tier, residency's choice of blocks to evict | stable |
//! | [`pool`] | the wgpu pool: [`Block`](pool::Block) handles, bindings, host overflow, offload and prefetch, residency | stable; start here |
//! | [`kernels`] | the WGSL kernels of `shaders/` on buffer ranges (pool blocks included) | stable |
//! | [`staging`] | the host staging pool: fast uploads to and downloads from blocks | stable |
//! | [`trace`] | allocation traces and their replay through the engine (`wgpool replay`) | stable |
//! | [`monitor`], [`plot`] | `wgpool info --watch`'s readings; SVG plots of memory over time | stable |
//! | `bench` | the `wgpool bench` command's code (feature `cli`, on by default) | internal |
//!
//! The `cli` feature (default) builds the `wgpool` command and its benchmark code; a library
//! user who needs neither sets `default-features = false`.
//!
//! # Guarantees
//!
//! No input makes the crate panic: bad sizes, foreign blocks, missing usages, bad
//! configurations and device out-of-memory are typed errors whose messages say what happened
//! and what to do. No byte outside a block is reachable through the block. Both are stated
//! where they apply ([`Block`](pool::Block), [`Pool::write`](pool::Pool::write)) and tested.

#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod bench;
pub mod config;
// The engine denies `unsafe` itself, except one audited cache-preload helper.
#[allow(unsafe_code)]
pub mod engine;
mod error_debug;
// A memory fence for the pools' owner bias, on the lowest floor so that `gpu` can ready it.
mod asymmetric_fence;
pub mod format;
pub mod gpu;
pub mod history;
pub mod kernels;
pub mod memory;
pub mod monitor;
pub mod plot;
pub mod pool;
// Test and benchmark data, below every other module; no stability promise.
#[doc(hidden)]
pub mod rng;
pub mod staging;
pub mod trace;

/// The README's Rust examples, compiled as doc tests so that they cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
