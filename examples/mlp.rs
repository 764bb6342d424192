//! A 3-layer MLP forward pass on pool tensors, on a wgpu device the application opens itself,
//! checked against the same computation on the CPU.
//!
//! - weights and biases live in one pool, activations in another, and the layer sizes in a
//!   third pool of uniform buffers;
//! - every layer is recorded into one encoder, and each input activation is dropped as soon
//!   as its layer is recorded: the pool holds its memory back until the encoder is submitted
//!   through `Pool::submit`, so no later block can take it too early;
//! - the kernel's weights stay `var<storage, read>` (their pool shares no buffer with the
//!   activations); activations are `read_write`, since they share the output's buffer.
//!
//! Run with `cargo run --example mlp` (software Vulkan works: see the README). CI runs it.

use wgpool::config::Config;
use wgpool::pool::{BindingAccess, Block, BlockBindings, Pool, PoolOptions};

const LAYER_KERNEL: &str = "
struct Dims { batch: u32, inputs: u32, outputs: u32, relu: u32 }

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> dims: Dims;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= dims.batch * dims.outputs) {
        return;
    }
    let row = i / dims.outputs;
    let col = i % dims.outputs;
    var acc = bias[col];
    for (var k = 0u; k < dims.inputs; k++) {
        acc += x[row * dims.inputs + k] * w[k * dims.outputs + col];
    }
    if (dims.relu != 0u && acc < 0.0) {
        acc = 0.0;
    }
    y[i] = acc;
}
";

const BATCH: usize = 32;
/// Inputs, two hidden layers, outputs.
const WIDTHS: [usize; 4] = [64, 128, 96, 10];

/// A matrix of f32 in a pool block, row-major.
struct Tensor {
    block: Block,
    rows: usize,
    cols: usize,
}

impl Tensor {
    fn new(pool: &Pool, rows: usize, cols: usize) -> Result<Tensor, Box<dyn std::error::Error>> {
        let block = pool.alloc((rows * cols * 4) as u64)?;
        Ok(Tensor { block, rows, cols })
    }

    fn from_values(
        pool: &Pool,
        rows: usize,
        cols: usize,
        values: &[f32],
    ) -> Result<Tensor, Box<dyn std::error::Error>> {
        let tensor = Tensor::new(pool, rows, cols)?;
        pool.write(&tensor.block, bytemuck::cast_slice(values))?;
        Ok(tensor)
    }
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

/// The same forward pass on the CPU.
fn cpu_forward(input: &[f32], layers: &[(Vec<f32>, Vec<f32>)]) -> Vec<f32> {
    let mut x = input.to_vec();
    for (index, (w, bias)) in layers.iter().enumerate() {
        let (inputs, outputs) = (WIDTHS[index], WIDTHS[index + 1]);
        let relu = index + 1 < layers.len();
        let mut y = vec![0.0f32; BATCH * outputs];
        for row in 0..BATCH {
            for col in 0..outputs {
                let mut acc = bias[col];
                for k in 0..inputs {
                    acc += x[row * inputs + k] * w[k * outputs + col];
                }
                y[row * outputs + col] = if relu { acc.max(0.0) } else { acc };
            }
        }
        x = y;
    }
    x
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The application's own device, as any wgpu program opens it.
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default()))?;
    println!("adapter: {}", adapter.get_info().name);

    let activations = Pool::new(&device, &queue, Config::from_env()?)?;
    let weights = Pool::with_options(
        &device,
        &queue,
        Config::default(),
        PoolOptions::default().with_label("weights"),
    )?;
    let uniforms = Pool::with_options(
        &device,
        &queue,
        Config::default(),
        PoolOptions::default()
            .with_usage(wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST)
            .with_label("layer sizes"),
    )?;

    let mut host_layers = Vec::new();
    let mut layers = Vec::new();
    for layer in 0..WIDTHS.len() - 1 {
        let (inputs, outputs) = (WIDTHS[layer], WIDTHS[layer + 1]);
        let scale = 1.0 / (inputs as f32).sqrt();
        let w: Vec<f32> = values(10 + layer as u64, inputs * outputs)
            .iter()
            .map(|v| v * scale)
            .collect();
        let bias = values(20 + layer as u64, outputs);
        let relu = u32::from(layer + 2 < WIDTHS.len());
        let dims = [BATCH as u32, inputs as u32, outputs as u32, relu];
        let dims_block = uniforms.alloc(16)?;
        uniforms.write(&dims_block, bytemuck::cast_slice(&dims))?;
        layers.push((
            Tensor::from_values(&weights, inputs, outputs, &w)?,
            Tensor::from_values(&weights, 1, outputs, &bias)?,
            dims_block,
        ));
        host_layers.push((w, bias));
    }
    let input = values(1, BATCH * WIDTHS[0]);
    let mut x = Tensor::from_values(&activations, BATCH, WIDTHS[0], &input)?;

    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("mlp layer"),
        source: wgpu::ShaderSource::Wgsl(LAYER_KERNEL.into()),
    });
    let entries = [
        (0, BindingAccess::ReadWrite),
        (1, BindingAccess::ReadOnly),
        (2, BindingAccess::ReadOnly),
        (3, BindingAccess::ReadWrite),
        (4, BindingAccess::Uniform),
    ]
    .map(|(binding, access)| access.layout_entry(binding, wgpu::ShaderStages::COMPUTE));
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("mlp layer"),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("mlp layer"),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("mlp layer"),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    for (w, bias, dims) in &layers {
        if x.cols != w.rows {
            return Err(format!("a {}-column input meets a {}-row weight", x.cols, w.rows).into());
        }
        let y = Tensor::new(&activations, x.rows, w.cols)?;
        // Checked before wgpu sees it: the activations share a buffer, so they are
        // read_write; the weights (another pool) may be read-only.
        let bindings = BlockBindings::new()
            .read_write(0, &x.block)
            .read(1, &w.block)
            .read(2, &bias.block)
            .read_write(3, &y.block)
            .uniform(4, dims);
        let group = bindings.create_bind_group(&device, &layout)?;
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups((y.rows * y.cols).div_ceil(64) as u32, 1, 1);
        }
        // The layer's input is no longer needed: dropping it now is safe, the pool holds its
        // memory until the encoder is submitted.
        x = y;
    }
    println!(
        "recorded {} layers; {} bytes of dropped activations wait for the submission",
        layers.len(),
        activations.held_bytes()
    );
    activations.submit([encoder.finish()]);
    weights.mark_submitted();
    uniforms.mark_submitted();
    println!("after submit: {} bytes held", activations.held_bytes());

    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&activations.read(&x.block)?);
    let expected = cpu_forward(&input, &host_layers);
    let worst = got
        .iter()
        .zip(&expected)
        .map(|(g, e)| (g - e).abs() / e.abs().max(1.0))
        .fold(0.0f32, f32::max);
    println!(
        "output {}x{}: largest relative difference to the CPU {worst:.2e}",
        x.rows, x.cols
    );
    println!(
        "activations: {} bytes allocated, {} reserved (peak allocated {})",
        activations.memory_allocated(),
        activations.memory_reserved(),
        activations.max_memory_allocated()
    );
    if worst > 1e-4 || got.len() != expected.len() {
        return Err(format!("the GPU result differs from the CPU's by {worst}").into());
    }
    activations.check_consistency()?;
    Ok(())
}
