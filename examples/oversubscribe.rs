//! A model whose weights do not fit the device budget, run layer by layer on a pool with
//! residency, checked against the CPU.
//!
//! - the weights (`--layers` matrices of `--width` x `--width` f32) live in a pool with a
//!   device budget well under their total (`--budget-mb`, by default 40% of it): the pool
//!   evicts the least recently used matrices to host memory and brings each back when its
//!   layer is recorded;
//! - every layer's bind group is built once, before the first pass, and recorded again on
//!   every pass: eviction keeps the weights' addresses, so the bind groups stay valid;
//! - the weight matrices are declared read-only once written (`Pool::set_read_only`): the
//!   pool keeps the host copy a matrix is restored from, so after its first eviction a
//!   matrix only moves in, never out (`--writable-weights` leaves them writable, to compare);
//! - the output of the last pass is compared with the same computation on the CPU.
//!
//! ```text
//! cargo run --release --example oversubscribe -- [--layers N] [--width N] [--batch N]
//!     [--passes N] [--budget-mb N] [--writable-weights] [--json] [--plot FILE]
//!     [--snapshot FILE]
//! ```
//!
//! With `--json` it prints one object (see the README's "Residency"). `--plot` draws the
//! weights pool's memory over its events as SVG (mapped pages and the bytes evicted to host
//! memory), `--snapshot` writes its history as a PyTorch memory snapshot pickle, where
//! evictions and restores are `segment_unmap` / `segment_map` events whose frame names
//! them. It exits with 1 when
//! the result is wrong, and with 2 on an error (a device that cannot map pages, say).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use wgpool::config::Config;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::history::{Timeline, write_torch_snapshot};
use wgpool::plot::{MemoryCurves, render_memory_svg};
use wgpool::pool::{
    BindingAccess, Block, BlockBindings, Pool, PoolBindGroup, PoolOptions, ResidencyOptions,
};

/// Events the weights pool's history keeps with `--plot` or `--snapshot`.
const HISTORY_EVENTS: usize = 1 << 20;

const LAYER_KERNEL: &str = "
struct Dims { batch: u32, width: u32, relu: u32, pad: u32 }

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> dims: Dims;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= dims.batch * dims.width) {
        return;
    }
    let row = i / dims.width;
    let col = i % dims.width;
    var acc = bias[col];
    for (var k = 0u; k < dims.width; k++) {
        acc += x[row * dims.width + k] * w[k * dims.width + col];
    }
    if (dims.relu != 0u && acc < 0.0) {
        acc = 0.0;
    }
    y[i] = acc;
}
";

/// The command line.
struct Args {
    layers: usize,
    width: usize,
    batch: usize,
    passes: usize,
    budget: Option<u64>,
    writable_weights: bool,
    json: bool,
    plot: Option<PathBuf>,
    snapshot: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        layers: 12,
        width: 512,
        batch: 16,
        passes: 2,
        budget: None,
        writable_weights: false,
        json: false,
        plot: None,
        snapshot: None,
    };
    let mut words = std::env::args().skip(1);
    while let Some(word) = words.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            let value = words
                .next()
                .ok_or_else(|| format!("{name} needs a value"))?;
            value
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{name} takes a positive whole number, not {value:?}"))
        };
        match word.as_str() {
            "--layers" => args.layers = number("--layers")? as usize,
            "--width" => args.width = number("--width")? as usize,
            "--batch" => args.batch = number("--batch")? as usize,
            "--passes" => args.passes = number("--passes")? as usize,
            "--budget-mb" => args.budget = Some(number("--budget-mb")? << 20),
            "--json" => args.json = true,
            "--writable-weights" => args.writable_weights = true,
            "--plot" | "--snapshot" => {
                let path = words
                    .next()
                    .map(PathBuf::from)
                    .ok_or_else(|| format!("{word} needs a file name"))?;
                if word == "--plot" {
                    args.plot = Some(path);
                } else {
                    args.snapshot = Some(path);
                }
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; expected --layers, --width, --batch, --passes, \
                     --budget-mb, --writable-weights, --json, --plot FILE or --snapshot FILE"
                ));
            }
        }
    }
    Ok(args)
}

/// Deterministic values in [-1, 1).
fn values(seed: u64, count: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// One layer: its weights and bias as the CPU and the pool hold them.
struct Layer {
    w: Vec<f32>,
    bias: Vec<f32>,
    w_block: Block,
    bias_block: Block,
    dims_block: Block,
}

/// The forward pass on the CPU, in the kernel's order of additions.
fn cpu_forward(input: &[f32], layers: &[Layer], width: usize, batch: usize) -> Vec<f32> {
    let mut x = input.to_vec();
    for (index, layer) in layers.iter().enumerate() {
        let relu = index + 1 < layers.len();
        let mut y = vec![0.0f32; batch * width];
        for row in 0..batch {
            for col in 0..width {
                let mut acc = layer.bias[col];
                for k in 0..width {
                    acc += x[row * width + k] * layer.w[k * width + col];
                }
                y[row * width + col] = if relu { acc.max(0.0) } else { acc };
            }
        }
        x = y;
    }
    x
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("oversubscribe: {error}");
            ExitCode::from(2)
        }
    }
}

/// Runs the model; `Ok(false)` when the result is wrong.
fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let (layers_n, width, batch) = (args.layers, args.width, args.batch);
    let gpu = GpuContext::headless(&HeadlessOptions::default())?;
    let matrix_bytes = (width * width * 4) as u64;
    let weights_bytes = matrix_bytes * layers_n as u64;
    let budget = args.budget.unwrap_or(weights_bytes * 2 / 5);
    if weights_bytes < 2 * budget {
        return Err(format!(
            "the weights ({weights_bytes} bytes) must be at least twice the budget ({budget} \
             bytes): lower --budget-mb or add --layers"
        )
        .into());
    }
    let weights = Pool::from_context_with(
        &gpu,
        Config::default(),
        PoolOptions::default()
            .with_label("weights")
            .with_residency(ResidencyOptions::new().with_device_budget(budget)),
    )?;
    if args.plot.is_some() || args.snapshot.is_some() {
        weights.record_history(Some(HISTORY_EVENTS));
    }
    let activations = Pool::with_options(
        gpu.device(),
        gpu.queue(),
        Config::default(),
        PoolOptions::default().with_label("activations"),
    )?;
    let device = gpu.device();

    let start = Instant::now();
    let mut layers = Vec::with_capacity(layers_n);
    for index in 0..layers_n {
        let scale = 1.0 / (width as f32).sqrt();
        let w: Vec<f32> = values(10 + index as u64, width * width)
            .iter()
            .map(|v| v * scale)
            .collect();
        let bias: Vec<f32> = values(1000 + index as u64, width)
            .iter()
            .map(|v| v * 0.1)
            .collect();
        let relu = u32::from(index + 1 < layers_n);
        let dims = [batch as u32, width as u32, relu, 0];
        // Writing a matrix makes it resident, evicting older ones once the budget is full.
        let w_block = weights.alloc_labeled(matrix_bytes, &format!("layer {index} weights"))?;
        weights.write(&w_block, bytemuck::cast_slice(&w))?;
        if !args.writable_weights {
            // Nothing writes the matrix from now on: evicting it again needs no copy.
            weights.set_read_only(&w_block, true)?;
        }
        let bias_block = weights.alloc((width * 4) as u64)?;
        weights.write(&bias_block, bytemuck::cast_slice(&bias))?;
        let dims_block = weights.alloc(16)?;
        weights.write(&dims_block, bytemuck::cast_slice(&dims))?;
        layers.push(Layer {
            w,
            bias,
            w_block,
            bias_block,
            dims_block,
        });
    }

    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("oversubscribe layer"),
        source: wgpu::ShaderSource::Wgsl(LAYER_KERNEL.into()),
    });
    let entries = [
        (0, BindingAccess::ReadWrite),
        (1, BindingAccess::ReadOnly),
        (2, BindingAccess::ReadOnly),
        (3, BindingAccess::ReadWrite),
        (4, BindingAccess::ReadOnly),
    ]
    .map(|(binding, access)| access.layout_entry(binding, wgpu::ShaderStages::COMPUTE));
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("oversubscribe layer"),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("oversubscribe layer"),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("oversubscribe layer"),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });

    // Two activations, used in turn: layer i reads one and writes the other.
    let activation_bytes = (batch * width * 4) as u64;
    let ping = activations.alloc(activation_bytes)?;
    let pong = activations.alloc(activation_bytes)?;
    // Every bind group is built once; evicted weights keep their addresses.
    let groups: Vec<PoolBindGroup> = layers
        .iter()
        .enumerate()
        .map(|(index, layer)| {
            let (x, y) = if index % 2 == 0 {
                (&ping, &pong)
            } else {
                (&pong, &ping)
            };
            BlockBindings::new()
                .read_write(0, x)
                .read(1, &layer.w_block)
                .read(2, &layer.bias_block)
                .read_write(3, y)
                .read(4, &layer.dims_block)
                .create_bind_group(device, &layout)
        })
        .collect::<Result<_, _>>()?;

    let input = values(1, batch * width);
    let groups_x = (batch * width).div_ceil(64) as u32;
    for _ in 0..args.passes {
        activations.write(&ping, bytemuck::cast_slice(&input))?;
        for group in &groups {
            let mut encoder = device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                // Recording the group brings its weights back if they were evicted.
                pass.set_bind_group(0, group, &[]);
                pass.dispatch_workgroups(groups_x, 1, 1);
            }
            weights.submit([encoder.finish()]);
        }
    }
    let output = if layers_n % 2 == 0 { &ping } else { &pong };
    let got: Vec<f32> = bytemuck::cast_slice(&activations.read(output)?).to_vec();
    let seconds = start.elapsed().as_secs_f64();

    let expected = cpu_forward(&input, &layers, width, batch);
    let max_abs_error = got
        .iter()
        .zip(&expected)
        .map(|(g, e)| (g - e).abs())
        .fold(0.0f32, f32::max);
    let scale = expected.iter().fold(1.0f32, |m, e| m.max(e.abs()));
    let verified = got.len() == expected.len() && max_abs_error <= 1e-4 * scale;
    let stats = weights
        .residency_stats()
        .ok_or("the weights pool has no residency")?;
    if let Some(path) = &args.snapshot {
        let snapshot = weights
            .torch_snapshot()
            .ok_or("the weights pool has no history")?;
        write_torch_snapshot(path, &snapshot)?;
    }
    if let Some(path) = &args.plot {
        let history = weights.history().ok_or("the weights pool has no history")?;
        let timeline = Timeline::of(&history, 2000);
        let svg = render_memory_svg(&MemoryCurves {
            title: format!(
                "oversubscribe: {layers_n} layers, {:.1} MiB of weights, budget {:.1} MiB",
                weights_bytes as f64 / (1 << 20) as f64,
                stats.budget_bytes as f64 / (1 << 20) as f64
            ),
            x_desc: "event",
            samples: &timeline.samples,
            ops: timeline.events,
            peak_reserved: timeline.peak_reserved,
        })?;
        std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if args.json {
        let info = gpu.info();
        let report = serde_json::json!({
            "adapter": info.name,
            "backend": info.backend.to_string(),
            "memory_mode": weights.memory_mode(),
            "layers": layers_n,
            "width": width,
            "batch": batch,
            "passes": args.passes,
            "budget_bytes": stats.budget_bytes,
            "weights_bytes": weights_bytes,
            "evictions": stats.evictions,
            "evicted_bytes": stats.evicted_bytes_total,
            "restores": stats.restores,
            "restored_bytes": stats.restored_bytes_total,
            "read_only_weights": !args.writable_weights,
            "copied_out_bytes": stats.copied_out_bytes_total,
            "copied_in_bytes": stats.copied_in_bytes_total,
            "move_seconds": stats.move_time.as_secs_f64(),
            "max_memory_reserved": weights.max_memory_reserved(),
            "seconds": seconds,
            "max_abs_error": max_abs_error,
            "verified": verified,
        });
        println!("{report}");
    } else {
        println!(
            "{} layers of {width}x{width} f32: {:.1} MiB of weights under a budget of {:.1} MiB",
            layers_n,
            weights_bytes as f64 / (1 << 20) as f64,
            stats.budget_bytes as f64 / (1 << 20) as f64,
        );
        println!(
            "{} passes in {seconds:.2} s: {} evictions ({:.1} MiB, {:.1} MiB copied out), {} \
             restores ({:.1} MiB); peak reserved {:.1} MiB",
            args.passes,
            stats.evictions,
            stats.evicted_bytes_total as f64 / (1 << 20) as f64,
            stats.copied_out_bytes_total as f64 / (1 << 20) as f64,
            stats.restores,
            stats.restored_bytes_total as f64 / (1 << 20) as f64,
            weights.max_memory_reserved() as f64 / (1 << 20) as f64,
        );
        println!(
            "max abs error against the CPU: {max_abs_error:e} ({})",
            if verified { "verified" } else { "WRONG" }
        );
    }
    Ok(verified)
}
