//! The benchmark driver: for every kernel, verify each placement on fresh random data, then
//! time the placements in interleaved rounds; then the in-device moves.

use crate::bench::timing::{Measurement, RunCounts, Timer, TimingMethod};
use crate::config::Config;
use crate::gpu::transfer::{read_region, write_region};
use crate::gpu::{AdapterSummary, GpuContext};
use crate::kernels::{
    Access, Dtype, Kernel, KernelCall, KernelOptions, Kernels, Operand, PreparedKernel,
};
use crate::pool::Residency;

use super::error::BenchError;
use super::mismatch_error::MismatchError;
use super::placement::{OperandPlacement, OperandSet, RawBuffers, create_operand_buffer};
use super::pool_placement::PoolBlocks;
use super::reference::{self, FILL_WORD, PATTERN_SEED, SCALAR};
use super::report::{BenchReport, KernelResult, MoveResult, Omission};

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Bytes per operand; a positive multiple of 16.
    pub size_bytes: u64,
    /// Warm-up and timed runs per measurement (at least 10 timed runs are recommended).
    pub counts: RunCounts,
    /// Time with wall clock even where GPU timestamps exist.
    pub force_wall: bool,
    /// Seed of the random inputs.
    pub seed: u64,
    /// Kernels to run; `None`: every kernel the device supports, except `move` (which has
    /// its own section).
    pub kernels: Option<Vec<Kernel>>,
    /// Binding window and workgroup cap of the kernels.
    pub kernel_options: KernelOptions,
}

/// Progress notifications, for a progress bar.
#[derive(Clone, Copy, Debug)]
pub enum BenchEvent<'a> {
    /// The run will take this many steps.
    Plan {
        /// Number of steps.
        steps: u64,
    },
    /// A step begins.
    Step {
        /// What it does.
        label: &'a str,
    },
}

/// The placements `wgpool bench` compares: dedicated buffers ([`RawBuffers`], `raw`), real
/// pool blocks ([`PoolBlocks::device`], `pool`: in pages mode where the device can map pages,
/// in shared segments elsewhere), and, where kernels can bind host memory, pool blocks
/// offloaded to host memory ([`PoolBlocks::host`], `host`); the pools run
/// [`DEFAULT_POOL_CONF`](super::DEFAULT_POOL_CONF).
pub fn default_placements(ctx: &GpuContext) -> Result<Vec<Box<dyn OperandPlacement>>, BenchError> {
    default_placements_with(ctx, &super::pool_placement::default_config())
}

/// [`default_placements`] with the `pool` and `host` placements' pools running `pool_config`
/// (`wgpool bench --conf`).
pub fn default_placements_with(
    ctx: &GpuContext,
    pool_config: &Config,
) -> Result<Vec<Box<dyn OperandPlacement>>, BenchError> {
    let mut placements: Vec<Box<dyn OperandPlacement>> = vec![
        Box::new(RawBuffers),
        Box::new(PoolBlocks::with_config(
            ctx,
            pool_config.clone(),
            Residency::Device,
        )?),
    ];
    if ctx
        .features()
        .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
    {
        placements.push(Box::new(PoolBlocks::with_config(
            ctx,
            pool_config.clone(),
            Residency::Host,
        )?));
    }
    Ok(placements)
}

/// Runs the benchmark. Each kernel runs on operands from each placement in turn: first on fresh
/// random inputs, checked against the CPU reference (a mismatch returns
/// [`BenchError::Verification`] at once), then warm-up and timed runs. The copy peak is the
/// f32 copy on the first placement named `raw` (measured separately when there is none).
///
/// On a device that wgpu has lost, every error is [`BenchError::DeviceLost`]: what a step
/// reports there (a failed map, a validation error of an object wgpu no longer made) is a
/// consequence, not the cause.
pub fn run_bench(
    ctx: &GpuContext,
    config: &BenchConfig,
    placements: &mut [Box<dyn OperandPlacement>],
    progress: &mut dyn FnMut(BenchEvent<'_>),
) -> Result<BenchReport, BenchError> {
    bench_kernels(ctx, config, placements, progress).map_err(|error| {
        match (&error, ctx.errors().check_device()) {
            (BenchError::DeviceLost { .. }, _) | (_, Ok(())) => error,
            (_, Err(source)) => BenchError::DeviceLost {
                during: format!("the kernel benchmark (which then reported: {error})"),
                source,
            },
        }
    })
}

fn bench_kernels(
    ctx: &GpuContext,
    config: &BenchConfig,
    placements: &mut [Box<dyn OperandPlacement>],
    progress: &mut dyn FnMut(BenchEvent<'_>),
) -> Result<BenchReport, BenchError> {
    if config.size_bytes == 0 || config.size_bytes % 16 != 0 {
        return Err(BenchError::Config(format!(
            "operand size {} bytes: it must be a positive multiple of 16 bytes",
            config.size_bytes
        )));
    }
    if config.counts.timed == 0 {
        return Err(BenchError::Config(
            "at least one timed run is needed".into(),
        ));
    }
    let kernels = Kernels::with_options(ctx.device(), ctx.queue(), config.kernel_options)?;
    let selected: Vec<Kernel> = match &config.kernels {
        Some(list) => {
            if let Some(&missing) = list.iter().find(|&&k| !kernels.supports(k)) {
                return Err(BenchError::Config(format!(
                    "kernel {}_{} needs features this device lacks ({:?})",
                    missing.name(),
                    missing.dtype().as_str(),
                    missing.required_features()
                )));
            }
            list.clone()
        }
        None => kernels
            .supported()
            .into_iter()
            .filter(|&k| k != Kernel::Move)
            .collect(),
    };
    let has_raw = placements.iter().any(|s| s.name() == "raw");
    let steps = (selected.len() * placements.len()) as u64 + 3 + u64::from(!has_raw);
    progress(BenchEvent::Plan { steps });
    let timer = Timer::new(ctx.device(), ctx.queue(), config.force_wall);
    let mut rows = Vec::new();
    let mut seed = config.seed;
    for &kernel in &selected {
        // Every placement is prepared and verified first, then timed in interleaved rounds,
        // so that a drift of the GPU's clocks falls on all placements alike.
        let mut prepared = Vec::with_capacity(placements.len());
        for placement in placements.iter_mut() {
            let label = format!(
                "{}_{} on {}",
                kernel.name(),
                kernel.dtype().as_str(),
                placement.name()
            );
            progress(BenchEvent::Step { label: &label });
            seed = seed.wrapping_add(0x100);
            prepared.push(prepare_kernel(
                ctx,
                &kernels,
                kernel,
                placement.as_mut(),
                config,
                seed,
            )?);
            check_uncaptured(ctx, &label)?;
        }
        rows.extend(time_interleaved(&timer, config, &prepared)?);
        check_uncaptured(ctx, kernel.name())?;
    }
    let peak = match rows
        .iter()
        .find(|r| r.placement == "raw" && r.name == "copy" && r.dtype == "f32")
    {
        Some(row) => row.gbps,
        None => {
            progress(BenchEvent::Step {
                label: "copy peak on raw buffers",
            });
            let copy = prepare_kernel(
                ctx,
                &kernels,
                Kernel::CopyF32,
                &mut RawBuffers,
                config,
                seed ^ 1,
            )?;
            time_interleaved(&timer, config, std::slice::from_ref(&copy))?[0].gbps
        }
    };
    for row in &mut rows {
        row.pct_of_copy_peak = if peak > 0.0 {
            100.0 * row.gbps / peak
        } else {
            0.0
        };
    }
    let moves = bench_moves(ctx, &kernels, &timer, config, seed ^ 2, progress)?;
    check_uncaptured(ctx, "moves")?;
    let timing = if rows.iter().all(|r| r.timing == TimingMethod::GpuTimestamps) && !rows.is_empty()
    {
        TimingMethod::GpuTimestamps
    } else {
        TimingMethod::Wall
    };
    Ok(BenchReport {
        adapter: AdapterSummary::new(ctx.info()),
        timing,
        size_bytes: config.size_bytes,
        warmup_runs: config.counts.warmup,
        min_warmup_ms: config.counts.min_warmup.as_millis() as u64,
        timed_runs: config.counts.timed,
        seed: config.seed,
        copy_peak_gbps: peak,
        pools: placements.iter().filter_map(|s| s.pool()).collect(),
        kernels: rows.into_iter().map(|r| r.result).collect(),
        omitted: omissions(ctx, &kernels, config, placements),
        moves,
        alloc: None,
        transfers: None,
        oversubscription: None,
    })
}

/// What the device's missing capabilities kept out of the run: unsupported kernels (when
/// the kernels were not chosen by name) and the `host` placement.
fn omissions(
    ctx: &GpuContext,
    kernels: &Kernels,
    config: &BenchConfig,
    placements: &[Box<dyn OperandPlacement>],
) -> Vec<Omission> {
    let capabilities = ctx.capabilities();
    let mut out = Vec::new();
    let unsupported: Vec<Kernel> = Kernel::ALL
        .into_iter()
        .filter(|&k| config.kernels.is_none() && !kernels.supports(k))
        .collect();
    // One omission per set of missing features; f16 is the only one the kernels need today.
    let mut features: Vec<wgpu::Features> = Vec::new();
    for kernel in &unsupported {
        if !features.contains(&kernel.required_features()) {
            features.push(kernel.required_features());
        }
    }
    for needed in features {
        let names: Vec<String> = unsupported
            .iter()
            .filter(|k| k.required_features() == needed)
            .map(|k| format!("{}_{}", k.name(), k.dtype().as_str()))
            .collect();
        let reason = if needed == wgpu::Features::SHADER_F16 {
            capabilities.f16.text().to_string()
        } else {
            format!("they need {needed:?}, which the device lacks")
        };
        out.push(Omission {
            what: format!("kernels {}", names.join(", ")),
            reason,
        });
    }
    if !capabilities.host_overflow.is_available() && !placements.iter().any(|s| s.name() == "host")
    {
        out.push(Omission {
            what: "placement host".to_string(),
            reason: capabilities.host_overflow.text().to_string(),
        });
    }
    out
}

/// Fails the step when wgpu reported errors outside every scope, or lost the device.
fn check_uncaptured(ctx: &GpuContext, during: &str) -> Result<(), BenchError> {
    ctx.errors()
        .check_device()
        .map_err(|source| BenchError::DeviceLost {
            during: during.to_string(),
            source,
        })?;
    let errors = ctx.errors().take_errors();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Uncaptured {
            during: during.to_string(),
            errors,
        })
    }
}

/// A kernel row before the copy peak is known.
struct Row {
    result: KernelResult,
    timing: TimingMethod,
}

impl std::ops::Deref for Row {
    type Target = KernelResult;
    fn deref(&self) -> &KernelResult {
        &self.result
    }
}

impl std::ops::DerefMut for Row {
    fn deref_mut(&mut self) -> &mut KernelResult {
        &mut self.result
    }
}

fn words_of(bytes: &[u8]) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(bytes)
}

fn upload(ctx: &GpuContext, operand: Operand<'_>, words: &[u32]) -> Result<(), BenchError> {
    write_region(
        ctx.device(),
        ctx.queue(),
        operand.buffer,
        operand.offset,
        bytemuck::cast_slice(words),
    )?;
    Ok(())
}

fn download(ctx: &GpuContext, operand: Operand<'_>) -> Result<Vec<u32>, BenchError> {
    Ok(words_of(&read_region(
        ctx.device(),
        ctx.queue(),
        operand.buffer,
        operand.offset,
        operand.size,
    )?))
}

/// The call of `kernel` on `set` (inputs first, then the output) with the benchmark's
/// scalars.
fn call_on<'a>(kernel: Kernel, set: &'a OperandSet, result: Option<Operand<'a>>) -> KernelCall<'a> {
    let op = |i| set.operand(i);
    let result = || result.expect("reductions get a result word");
    match kernel {
        Kernel::CopyF32 => KernelCall::copy(Dtype::F32, op(0), op(1)),
        Kernel::CopyF16 => KernelCall::copy(Dtype::F16, op(0), op(1)),
        Kernel::ScaleF32 => KernelCall::scale(op(0), SCALAR, op(1)),
        Kernel::AddF32 => KernelCall::add(op(0), op(1), op(2)),
        Kernel::TriadF32 => KernelCall::triad(Dtype::F32, op(0), op(1), SCALAR, op(2)),
        Kernel::TriadF16 => KernelCall::triad(Dtype::F16, op(0), op(1), SCALAR, op(2)),
        Kernel::Fill => KernelCall::fill(op(0), FILL_WORD),
        Kernel::FillPattern => KernelCall::fill_pattern(op(0), PATTERN_SEED),
        Kernel::Checksum => KernelCall::checksum(op(0), result()),
        Kernel::Compare => KernelCall::compare(op(0), op(1), result()),
        Kernel::Move => KernelCall::move_bytes(op(0), op(1)),
    }
}

/// A kernel on one placement, verified and ready to time; its operands stay allocated while
/// it lives.
struct PreparedPlacement {
    placement: String,
    prepared: PreparedKernel,
    _set: OperandSet,
    _result: Option<wgpu::Buffer>,
}

/// Allocates the kernel's operands from `placement`, fills them with random data, runs the
/// kernel once and checks its output against the CPU reference.
fn prepare_kernel(
    ctx: &GpuContext,
    kernels: &Kernels,
    kernel: Kernel,
    placement: &mut dyn OperandPlacement,
    config: &BenchConfig,
    seed: u64,
) -> Result<PreparedPlacement, BenchError> {
    let size = config.size_bytes;
    let words = (size / 4) as usize;
    let inputs = kernel.input_names().len();
    let data_operands = inputs + usize::from(kernel.output_name().is_some());
    let set = placement.allocate(ctx, data_operands, size)?;
    if set.len() != data_operands || set.regions().iter().any(|r| r.size != size) {
        return Err(BenchError::Config(format!(
            "placement {} returned {} operands for a request of {data_operands} of {size} bytes",
            placement.name(),
            set.len()
        )));
    }
    let result_buffer = if kernel.has_result() {
        Some(create_operand_buffer(ctx, 256, "reduction result")?)
    } else {
        None
    };
    let result = result_buffer.as_ref().map(|b| Operand::new(b, 0, 4));
    let input_words = reference::inputs(kernel, words, seed);
    for (i, data) in input_words.iter().enumerate() {
        upload(ctx, set.operand(i), data)?;
    }
    if kernel.output_name().is_some() {
        // Stale garbage in the output, so a kernel that writes nothing cannot pass.
        let garbage = reference::random_words(Dtype::U32, words, !seed);
        upload(ctx, set.operand(inputs), &garbage)?;
    }
    let prepared: PreparedKernel = kernels.prepare(&call_on(kernel, &set, result))?;
    kernels.submit(&prepared)?;
    let output = match kernel.output_name() {
        Some(_) => Some(download(ctx, set.operand(inputs))?),
        None => None,
    };
    let result_word = match result {
        Some(word) => Some(download(ctx, word)?[0]),
        None => None,
    };
    let label = format!("{}_{}", kernel.name(), kernel.dtype().as_str());
    reference::check(kernel, &input_words, output.as_deref(), result_word, words).map_err(
        |mismatch| BenchError::Verification {
            kernel: label.clone(),
            placement: placement.name().to_string(),
            source: mismatch,
        },
    )?;
    check_uncaptured(ctx, &label)?;
    Ok(PreparedPlacement {
        placement: placement.name().to_string(),
        prepared,
        _set: set,
        _result: result_buffer,
    })
}

/// Rounds in which every placement of a kernel is timed in turn: the timed runs are split
/// between them and the median is taken over all of a placement's runs.
const TIMING_ROUNDS: u32 = 3;

/// Times each prepared placement: [`TIMING_ROUNDS`] rounds, each timing every placement in
/// turn with a share of `config.counts.timed` runs. The first measurement warms up for
/// `min_warmup`; later ones follow it back to back and run the warm-up runs only.
fn time_interleaved(
    timer: &Timer,
    config: &BenchConfig,
    placements: &[PreparedPlacement],
) -> Result<Vec<Row>, BenchError> {
    let rounds = TIMING_ROUNDS.min(config.counts.timed).max(1);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); placements.len()];
    let mut methods = vec![TimingMethod::Wall; placements.len()];
    for round in 0..rounds {
        // Spread the timed runs over the rounds: the first rounds take the remainder.
        let timed = config.counts.timed / rounds + u32::from(round < config.counts.timed % rounds);
        for (i, placement) in placements.iter().enumerate() {
            let first = round == 0 && i == 0;
            let counts = RunCounts {
                warmup: config.counts.warmup,
                min_warmup: if first {
                    config.counts.min_warmup
                } else {
                    std::time::Duration::ZERO
                },
                timed,
            };
            let measured: Measurement = timer.measure_pass(counts, |encoder, writes| {
                placement.prepared.record(encoder, writes)
            })?;
            methods[i] = measured.method;
            samples[i].extend(measured.samples_ns);
        }
    }
    Ok(placements
        .iter()
        .zip(samples)
        .zip(methods)
        .map(|((placement, samples), method)| {
            let measured = Measurement::new(method, samples);
            let prepared = &placement.prepared;
            let bytes = prepared.bytes_moved();
            Row {
                timing: measured.method,
                result: KernelResult {
                    name: prepared.kernel().name().to_string(),
                    dtype: prepared.kernel().dtype().as_str().to_string(),
                    placement: placement.placement.clone(),
                    bytes,
                    gbps: measured.gbps(bytes),
                    pct_of_copy_peak: 0.0,
                    verified: true,
                    median_ns: measured.median_ns,
                    dispatches: prepared.dispatches(),
                    input_access: match prepared.access() {
                        Access::ReadOnlyInputs => "read_only",
                        Access::ReadWriteInputs => "read_write",
                    }
                    .to_string(),
                },
            }
        })
        .collect())
}

fn bench_moves(
    ctx: &GpuContext,
    kernels: &Kernels,
    timer: &Timer,
    config: &BenchConfig,
    seed: u64,
    progress: &mut dyn FnMut(BenchEvent<'_>),
) -> Result<MoveResult, BenchError> {
    let size = config.size_bytes;
    let words = (size / 4) as usize;
    let data = reference::random_words(Dtype::U32, words, seed);
    let garbage = reference::random_words(Dtype::U32, words, !seed);
    let exact = |what: &str, got: Vec<u32>| -> Result<(), BenchError> {
        match got.iter().zip(&data).position(|(g, d)| g != d) {
            None if got.len() == data.len() => Ok(()),
            found => Err(BenchError::Verification {
                kernel: what.to_string(),
                placement: "raw".to_string(),
                source: match found {
                    Some(i) => MismatchError::Word {
                        word: i,
                        detail: format!(
                            "word {i} is {:#010x}, source has {:#010x}",
                            got[i], data[i]
                        ),
                    },
                    None => MismatchError::Returned {
                        got: got.len(),
                        expected: data.len(),
                    },
                },
            }),
        }
    };
    let bytes = 2 * size;

    progress(BenchEvent::Step {
        label: "move: copy kernel between two buffers",
    });
    let src = create_operand_buffer(ctx, size, "move source")?;
    let dst = create_operand_buffer(ctx, size, "move destination")?;
    upload(ctx, Operand::whole(&src), &data)?;
    upload(ctx, Operand::whole(&dst), &garbage)?;
    let between = kernels.prepare(&KernelCall::move_bytes(
        Operand::whole(&src),
        Operand::whole(&dst),
    ))?;
    kernels.submit(&between)?;
    exact(
        "move (copy kernel, two buffers)",
        download(ctx, Operand::whole(&dst))?,
    )?;
    let kernel = timer.measure_commands(config.counts, |encoder| between.record(encoder, None))?;
    check_uncaptured(ctx, "move between buffers")?;

    progress(BenchEvent::Step {
        label: "move: copy_buffer_to_buffer",
    });
    upload(ctx, Operand::whole(&dst), &garbage)?;
    crate::gpu::scope::catch(ctx.device(), || {
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&src, 0, &dst, 0, size);
        ctx.queue().submit([encoder.finish()]);
    })
    .map_err(|source| BenchError::Allocation {
        what: "copy_buffer_to_buffer".into(),
        source,
    })?;
    exact(
        "copy_buffer_to_buffer",
        download(ctx, Operand::whole(&dst))?,
    )?;
    let copy = timer.measure_commands(config.counts, |encoder| {
        encoder.copy_buffer_to_buffer(&src, 0, &dst, 0, size)
    })?;
    drop((src, dst, between));

    progress(BenchEvent::Step {
        label: "move: copy kernel inside one buffer",
    });
    // Two pool-like blocks in one segment: at 512 and at the next 512-multiple after a gap.
    let to_offset = (size + 1024).div_ceil(512) * 512;
    let segment = create_operand_buffer(ctx, to_offset + size + 512, "move segment")?;
    let from = Operand::new(&segment, 512, size);
    let to = Operand::new(&segment, to_offset, size);
    upload(ctx, from, &data)?;
    upload(ctx, to, &garbage)?;
    let inside = kernels.prepare(&KernelCall::move_bytes(from, to))?;
    kernels.submit(&inside)?;
    exact("move (copy kernel, one buffer)", download(ctx, to)?)?;
    let same = timer.measure_commands(config.counts, |encoder| inside.record(encoder, None))?;

    let timing = if [&kernel, &copy, &same]
        .iter()
        .all(|m| m.method == TimingMethod::GpuTimestamps)
    {
        TimingMethod::GpuTimestamps
    } else {
        TimingMethod::Wall
    };
    let kernel_gbps = kernel.gbps(bytes);
    let copy_buffer_gbps = copy.gbps(bytes);
    Ok(MoveResult {
        size_bytes: size,
        timing,
        kernel_gbps,
        copy_buffer_gbps,
        ratio: if copy_buffer_gbps > 0.0 {
            kernel_gbps / copy_buffer_gbps
        } else {
            0.0
        },
        kernel_same_buffer_gbps: same.gbps(bytes),
        verified: true,
    })
}
