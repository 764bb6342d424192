//! A small MLP on pool blocks, as an application writes one: layers recorded into one
//! encoder, each input dropped as soon as its layer is recorded, weights in a pool of their
//! own bound read-only. Its output is checked against the same computation on the CPU.

use wgpool::pool::{BindingAccess, Block, BlockBindings, Pool, PoolBindGroup};

/// Rows of every activation.
pub const BATCH: usize = 4;
/// Inputs, two hidden layers, outputs.
pub const WIDTHS: [usize; 4] = [16, 24, 12, 4];

const LAYER_KERNEL: &str = "
struct Dims { batch: u32, inputs: u32, outputs: u32, relu: u32 }

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> dims: Dims;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= dims.batch * dims.outputs) {
        return;
    }
    let row = i / dims.outputs;
    let col = i % dims.outputs;
    var acc = 0.0;
    for (var k = 0u; k < dims.inputs; k++) {
        acc += x[row * dims.inputs + k] * w[k * dims.outputs + col];
    }
    if (dims.relu != 0u && acc < 0.0) {
        acc = 0.0;
    }
    y[i] = acc;
}
";

/// Deterministic values in [-1, 1).
pub fn values(seed: u64, count: usize) -> Vec<f32> {
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

/// The model: its pipeline and its weights, in a pool of their own.
pub struct Mlp {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    /// Per layer: weights and sizes.
    pub layers: Vec<(Block, Block)>,
    /// The weights as the CPU sees them.
    pub host: Vec<Vec<f32>>,
}

impl Mlp {
    /// A model with weights drawn from `seed`, in `weights` (a pool other than the
    /// activations').
    pub fn new(weights: &Pool, seed: u64) -> Mlp {
        let device = weights.device();
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("mlp layer"),
            source: wgpu::ShaderSource::Wgsl(LAYER_KERNEL.into()),
        });
        let entries = [
            (0, BindingAccess::ReadWrite),
            (1, BindingAccess::ReadOnly),
            (2, BindingAccess::ReadOnly),
            (3, BindingAccess::ReadWrite),
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
        let mut layers = Vec::new();
        let mut host = Vec::new();
        for layer in 0..WIDTHS.len() - 1 {
            let (inputs, outputs) = (WIDTHS[layer], WIDTHS[layer + 1]);
            let scale = 1.0 / (inputs as f32).sqrt();
            let w: Vec<f32> = values(seed + layer as u64, inputs * outputs)
                .iter()
                .map(|v| v * scale)
                .collect();
            let relu = u32::from(layer + 2 < WIDTHS.len());
            let dims = [BATCH as u32, inputs as u32, outputs as u32, relu];
            let w_block = weights.alloc((w.len() * 4) as u64).expect("weights");
            weights
                .write(&w_block, bytemuck::cast_slice(&w))
                .expect("write weights");
            let dims_block = weights.alloc(16).expect("dims");
            weights
                .write(&dims_block, bytemuck::cast_slice(&dims))
                .expect("write dims");
            layers.push((w_block, dims_block));
            host.push(w);
        }
        Mlp {
            pipeline,
            layout,
            layers,
            host,
        }
    }

    /// The bind group of `layer` from `x` to `y`.
    pub fn bind(&self, layer: usize, x: &Block, y: &Block) -> PoolBindGroup {
        let (w, dims) = &self.layers[layer];
        BlockBindings::new()
            .read_write(0, x)
            .read(1, w)
            .read(2, dims)
            .read_write(3, y)
            .create_bind_group(x.device(), &self.layout)
            .expect("layer bindings")
    }

    /// Records `layer` with `group` into `encoder`.
    pub fn record(&self, encoder: &mut wgpu::CommandEncoder, layer: usize, group: &PoolBindGroup) {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, group, &[]);
        let outputs = BATCH * WIDTHS[layer + 1];
        pass.dispatch_workgroups(outputs.div_ceil(64) as u32, 1, 1);
    }

    /// Records the whole forward pass of `input` on blocks of `activations`, dropping each
    /// activation as soon as the layer that reads it is recorded; returns the output block.
    pub fn record_forward(
        &self,
        activations: &Pool,
        encoder: &mut wgpu::CommandEncoder,
        input: &[f32],
    ) -> Block {
        let mut x = activations.alloc((input.len() * 4) as u64).expect("input");
        activations
            .write(&x, bytemuck::cast_slice(input))
            .expect("write input");
        for layer in 0..self.layers.len() {
            let y = activations
                .alloc((BATCH * WIDTHS[layer + 1] * 4) as u64)
                .expect("activation");
            let group = self.bind(layer, &x, &y);
            self.record(encoder, layer, &group);
            // The layer's input is no longer needed by the application.
            x = y;
        }
        x
    }

    /// The forward pass on the CPU.
    pub fn cpu_forward(&self, input: &[f32]) -> Vec<f32> {
        let mut x = input.to_vec();
        for (layer, w) in self.host.iter().enumerate() {
            let (inputs, outputs) = (WIDTHS[layer], WIDTHS[layer + 1]);
            let relu = layer + 2 < WIDTHS.len();
            let mut y = vec![0.0f32; BATCH * outputs];
            for row in 0..BATCH {
                for col in 0..outputs {
                    let mut acc = 0.0f32;
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
}

/// The largest absolute difference between two equally long vectors (infinite when the
/// lengths differ).
pub fn max_abs_error(got: &[f32], expected: &[f32]) -> f32 {
    if got.len() != expected.len() {
        return f32::INFINITY;
    }
    got.iter()
        .zip(expected)
        .map(|(g, e)| (g - e).abs())
        .fold(0.0, f32::max)
}
