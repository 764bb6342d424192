//! Internal to the `wgpool` command and its tests (feature `cli`), with no stability promise:
//! `wgpool bench`: kernels on pool blocks (device- and host-resident) and on raw buffers,
//! in-device moves, allocation latency and host transfers.
//!
//! Every kernel result is checked against a CPU reference on fresh random data before it is
//! timed; a mismatch aborts the run. Figures count bytes read plus bytes written.
//!
//! Placements are [`OperandPlacement`]s: [`default_placements`] gives raw buffers and real pool
//! blocks; any other placement can be passed to [`run_bench`] beside them.
//!
//! ```no_run
//! use wgpool::bench::{BenchConfig, default_placements, run_bench, table};
//! use wgpool::bench::timing::RunCounts;
//! use wgpool::gpu::{GpuContext, HeadlessOptions};
//! let ctx = GpuContext::headless(&HeadlessOptions::default())?;
//! let config = BenchConfig {
//!     size_bytes: 8 << 20,
//!     counts: RunCounts::new(2, 10),
//!     force_wall: false,
//!     seed: 1,
//!     kernels: None,
//!     kernel_options: Default::default(),
//! };
//! let report = run_bench(&ctx, &config, &mut default_placements(&ctx)?, &mut |_| {})?;
//! print!("{}", table::render(&report));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod alloc_latency;
mod error;
pub mod half;
mod mismatch_error;
pub mod oversubscription;
pub mod placement;
pub mod pool_placement;
pub mod reference;
mod report;
pub mod residency_moves;
mod residency_moves_error;
mod run;
pub mod table;
pub mod timing;
pub mod transfers;

pub use crate::rng;
pub use error::BenchError;
pub use mismatch_error::MismatchError;
pub use placement::{BufferRegion, OperandPlacement, OperandSet, RawBuffers};
pub use pool_placement::{DEFAULT_POOL_CONF, PoolBlocks};
pub use report::{BenchReport, KernelResult, MoveResult, Omission, PlacementPool};
pub use residency_moves_error::ResidencyMovesError;
pub use run::{BenchConfig, BenchEvent, default_placements, default_placements_with, run_bench};
