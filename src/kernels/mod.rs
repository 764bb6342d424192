//! WGSL compute kernels from `shaders/`, and the code that dispatches them on buffer
//! regions.
//!
//! - [`Kernel`]: the kernels (STREAM copy/scale/add/triad on f32, copy/triad on f16, fill,
//!   fill_pattern, checksum, compare, move) and their shader sources.
//! - [`Operand`]: a byte range of a buffer, such as a pool block.
//! - [`KernelCall`]: a kernel with its operands; [`Kernels::prepare`] checks it and turns it
//!   into a [`PreparedKernel`] to record into any encoder.
//! - [`Kernels`]: compiled pipelines of one device, plus submitting conveniences
//!   ([`Kernels::move_bytes`], [`Kernels::checksum`], [`Kernels::count_mismatches`]).
//!
//! ```no_run
//! use wgpool::gpu::{GpuContext, HeadlessOptions};
//! use wgpool::kernels::{Kernels, Operand};
//! let ctx = GpuContext::headless(&HeadlessOptions::default())?;
//! let kernels = Kernels::new(ctx.device(), ctx.queue());
//! let segment = ctx.device().create_buffer(&wgpu::BufferDescriptor {
//!     label: None,
//!     size: 1 << 20,
//!     usage: wgpu::BufferUsages::STORAGE,
//!     mapped_at_creation: false,
//! });
//! // Move one 4 KiB block to another place in the same segment.
//! kernels.move_bytes(Operand::new(&segment, 512, 4096), Operand::new(&segment, 8192, 4096))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod call;
mod device_kernels;
mod error;
mod kernel;
mod operand;
mod pattern;
mod prepared;
mod window;

pub use call::KernelCall;
pub use device_kernels::{KernelOptions, Kernels, WORKGROUP_SIZE};
pub use error::KernelError;
pub use kernel::{Access, Dtype, Kernel, shader_source};
pub use operand::Operand;
pub use pattern::{checksum, mix32, pattern_word};
pub use prepared::PreparedKernel;
pub use window::split_windows;
