//! The benchmark report: what `wgpool bench --json` prints, one serde structure.

use serde::Serialize;

use crate::bench::timing::TimingMethod;
use crate::gpu::AdapterSummary;
use crate::pool::MemoryMode;

/// Everything one `wgpool bench` run measured, as `--json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// The adapter the run used.
    pub adapter: AdapterSummary,
    /// How the kernel rows were timed (`wall` if any row had to fall back to wall time).
    pub timing: TimingMethod,
    /// Bytes per operand.
    pub size_bytes: u64,
    /// Untimed runs before each measurement.
    pub warmup_runs: u32,
    /// Least warm-up time before each measurement, in milliseconds.
    pub min_warmup_ms: u64,
    /// Timed runs per measurement; figures are medians over these. A kernel's placements are
    /// timed in 3 interleaved rounds that share the runs.
    pub timed_runs: u32,
    /// Seed of the random inputs (pass `--seed` to repeat a run's data).
    pub seed: u64,
    /// Read+write GB/s of the f32 copy kernel on raw buffers: the reference for
    /// `pct_of_copy_peak`.
    pub copy_peak_gbps: f64,
    /// The pool behind each placement that has one (`pool`, `host`): its configuration and
    /// the memory mode it ran, so that a report says whether `pool` rows were measured on
    /// address ranges or on fixed segments.
    pub pools: Vec<PlacementPool>,
    /// One row per kernel and placement, in run order.
    pub kernels: Vec<KernelResult>,
    /// What the run left out because the device lacks what it needs (kernels without
    /// `SHADER_F16`, the `host` placement without `MAPPABLE_PRIMARY_BUFFERS`), each with the
    /// reason from [`BackendCapabilities`](crate::gpu::BackendCapabilities); empty where
    /// nothing was left out.
    pub omitted: Vec<Omission>,
    /// In-device move rates.
    pub moves: MoveResult,
    /// Pool allocation latency ([`alloc_latency::AllocLatency`](super::alloc_latency::AllocLatency)); `wgpool bench` always fills it.
    pub alloc: Option<serde_json::Value>,
    /// Host transfer figures (`--transfers`): the staging pool against wgpu's own paths, and
    /// offload / prefetch of a pool block; `null` without `--transfers`.
    pub transfers: Option<serde_json::Value>,
    /// Oversubscription figures (`--oversubscription`, see
    /// [`oversubscription`](super::oversubscription)); `null` without it.
    pub oversubscription: Option<serde_json::Value>,
}

/// One kernel on one placement.
#[derive(Clone, Debug, Serialize)]
pub struct KernelResult {
    /// `copy`, `scale`, `add`, `triad`, `fill`, `fill_pattern`, `checksum`, `compare`.
    pub name: String,
    /// `f32`, `f16` or `u32`.
    pub dtype: String,
    /// Where the operands were: `raw`, `pool`, ...
    pub placement: String,
    /// Bytes read plus bytes written per run.
    pub bytes: u64,
    /// `bytes / median_ns`: read+write GB/s (10^9 bytes per second).
    pub gbps: f64,
    /// `gbps` as a percentage of [`BenchReport::copy_peak_gbps`].
    pub pct_of_copy_peak: f64,
    /// The result matched the CPU reference before timing (always true in a report: a
    /// mismatch aborts the run).
    pub verified: bool,
    /// Median duration of one run, in nanoseconds.
    pub median_ns: f64,
    /// Dispatches per run (more than one when an operand exceeds the binding limit).
    pub dispatches: usize,
    /// `read_only` inputs, or `read_write` when inputs share a buffer with the output.
    pub input_access: String,
}

/// The copy kernel as an in-device move, against `copy_buffer_to_buffer`, same size.
#[derive(Clone, Debug, Serialize)]
pub struct MoveResult {
    /// Bytes moved per run (each is read once and written once).
    pub size_bytes: u64,
    /// How the moves were timed (GPU timestamps need `TIMESTAMP_QUERY_INSIDE_ENCODERS`).
    pub timing: TimingMethod,
    /// Read+write GB/s of the copy-kernel move between two buffers.
    pub kernel_gbps: f64,
    /// Read+write GB/s of `copy_buffer_to_buffer` between the same two buffers.
    pub copy_buffer_gbps: f64,
    /// `kernel_gbps / copy_buffer_gbps`.
    pub ratio: f64,
    /// Read+write GB/s of the copy-kernel move between two regions of one buffer (what
    /// defragmentation inside a segment does; `copy_buffer_to_buffer` cannot do this).
    pub kernel_same_buffer_gbps: f64,
    /// All three moves produced exact copies before timing.
    pub verified: bool,
}

/// Part of the benchmark that did not run on this device, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Omission {
    /// What was left out (`kernels copy_f16, triad_f16`, `placement host`).
    pub what: String,
    /// Why: the capability the device lacks, in its own words.
    pub reason: String,
}

/// The pool behind one placement.
#[derive(Clone, Debug, Serialize)]
pub struct PlacementPool {
    /// The placement: `pool` or `host`.
    pub placement: String,
    /// The pool's configuration, in `WGPOOL_CONF` syntax.
    pub conf: String,
    /// `pages` (address ranges) or `segments` (fixed segment buffers).
    pub memory_mode: MemoryMode,
    /// Why the pool runs in that mode ([`Pool::memory_mode_reason`](crate::pool::Pool::memory_mode_reason)).
    pub memory_mode_reason: String,
}
