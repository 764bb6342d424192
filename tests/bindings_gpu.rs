//! What binding a block checks (issue 24): one read-only rule in both memory modes, decided
//! by where blocks come from and never by where they were placed, and blocks of pools on
//! another device refused by every path that takes a block.

mod common;

use wgpool::config::Config;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::kernels::{KernelCall, KernelError, Kernels};
use wgpool::pool::{
    BindingAccess, BindingError, BlockBindings, MemoryMode, MoveError, Pool, ReadWriteError,
};
use wgpool::staging::{StagingError, StagingOptions, StagingPool};

fn pool(gpu: &GpuContext, conf: &str) -> Pool {
    Pool::from_context(gpu, Config::parse(conf).expect("conf")).expect("pool")
}

const LAYER: &str = "
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < arrayLength(&y)) {
        y[i] = x[i] * w[i];
    }
}
";

/// 1,200 layers of varied sizes: `var<storage, read>` beside a `read_write` output of the same
/// pool is refused every time, in both modes, whatever the placement; the documented shapes
/// (inputs of the output's pool declared read_write, read-only inputs from another pool)
/// are accepted every time, and run.
fn one_read_only_rule(conf: &str, mode: MemoryMode) {
    let gpu = common::gpu();
    let device = gpu.device();
    let activations = pool(gpu, conf);
    let weights = pool(gpu, conf);
    assert_eq!(activations.memory_mode(), mode);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(LAYER.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let layout = pipeline.get_bind_group_layout(0);
    let (mut refused, mut accepted, mut shared_buffer) = (0, 0, 0);
    let mut live = Vec::new();
    for layer in 0..1200u64 {
        let n = 64 + (layer * 7919 % 4000);
        let x = activations.alloc(4 * n).unwrap();
        let y = activations.alloc(4 * n).unwrap();
        let w = weights.alloc(4 * n).unwrap();
        shared_buffer += usize::from(x.buffer() == y.buffer());
        let natural = BlockBindings::new()
            .read(0, &x)
            .read(1, &w)
            .read_write(2, &y);
        match natural.check() {
            Err(BindingError::ReadOnlyConflict {
                read_only: 0,
                read_write: 2,
            }) => refused += 1,
            other => panic!("layer {layer}: {other:?}"),
        }
        assert!(natural.create_bind_group(device, &layout).is_err());
        let documented = BlockBindings::new()
            .read_write(0, &x)
            .read(1, &w)
            .read_write(2, &y);
        documented.check().expect("documented shape");
        accepted += 1;
        if layer % 100 == 0 {
            let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let ws: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
            activations.write(&x, bytemuck::cast_slice(&xs)).unwrap();
            weights.write(&w, bytemuck::cast_slice(&ws)).unwrap();
            let group = documented.create_bind_group(device, &layout).unwrap();
            let mut encoder = device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups(n.div_ceil(64) as u32, 1, 1);
            }
            activations.submit([encoder.finish()]);
            let ys: Vec<f32> = bytemuck::pod_collect_to_vec(&activations.read(&y).unwrap());
            assert!(
                ys.iter().enumerate().all(|(i, &v)| v == xs[i] * ws[i]),
                "layer {layer}"
            );
        }
        // Keep some blocks alive and free the others, so that placements vary.
        if layer % 3 == 0 {
            live.push((x, y, w));
        }
        activations.mark_submitted();
    }
    assert_eq!((refused, accepted), (1200, 1200));
    // Placement varied: some pairs share a buffer (a segment, or a wrapper of a range) and
    // some do not. A rule decided by buffers would have accepted the latter.
    assert!(
        0 < shared_buffer && shared_buffer < 1200,
        "{shared_buffer} of 1200 share"
    );
    drop(live);
    activations.mark_submitted();
}

#[test]
fn read_only_beside_read_write_of_one_pool_is_refused_on_every_placement_in_segments_mode() {
    one_read_only_rule("expandable_segments:False", MemoryMode::Segments);
}

#[test]
fn read_only_beside_read_write_of_one_pool_is_refused_on_every_placement_in_pages_mode() {
    one_read_only_rule("expandable_segments:True", MemoryMode::Pages);
}

/// A plain buffer conflicts only with itself.
#[test]
fn plain_buffers_conflict_only_through_their_own_buffer() {
    let gpu = common::gpu();
    let device = gpu.device();
    let pool = pool(gpu, "");
    let block = pool.alloc(4096).unwrap();
    let plain = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4096,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let ok = BlockBindings::new().read_write(0, &block).buffer(
        1,
        BindingAccess::ReadOnly,
        plain.as_entire_buffer_binding(),
    );
    ok.check().expect("a plain buffer beside a block");
    let twice = BlockBindings::new()
        .buffer(0, BindingAccess::ReadOnly, plain.as_entire_buffer_binding())
        .buffer(
            1,
            BindingAccess::ReadWrite,
            plain.as_entire_buffer_binding(),
        );
    assert_eq!(
        twice.check(),
        Err(BindingError::ReadOnlyConflict {
            read_only: 0,
            read_write: 1
        })
    );
}

/// Every path that takes a block refuses one of a pool on another device, with a typed error
/// and nothing done.
#[test]
fn blocks_of_a_pool_on_another_device_are_refused_everywhere() {
    let here = common::gpu();
    let there = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let local = pool(here, "");
    let foreign_pool = pool(&there, "");
    let mine = local.alloc(4096).unwrap();
    let mut theirs = foreign_pool.alloc(4096).unwrap();
    foreign_pool.write(&theirs, &[3; 4096]).unwrap();
    assert_eq!(theirs.device(), there.device());

    // Bindings: a group of blocks of two devices, and a group on the wrong device.
    let mixed = BlockBindings::new()
        .read_write(0, &mine)
        .read_write(1, &theirs);
    assert_eq!(
        mixed.check(),
        Err(BindingError::ForeignDevice { binding: 1 })
    );
    let pipeline = common::fill_ones_pipeline(here.device());
    let layout = pipeline.get_bind_group_layout(0);
    let error = BlockBindings::new()
        .read_write(0, &theirs)
        .create_bind_group(here.device(), &layout)
        .unwrap_err();
    assert_eq!(error, BindingError::ForeignDevice { binding: 0 });
    assert!(error.to_string().contains("another device"), "{error}");
    assert!(
        BlockBindings::new()
            .read_write(0, &theirs)
            .create_layout(here.device(), wgpu::ShaderStages::COMPUTE)
            .is_err()
    );

    // Kernels.
    let kernels = Kernels::new(here.device(), here.queue());
    let mut encoder = here.device().create_command_encoder(&Default::default());
    let error = kernels
        .record(&mut encoder, &KernelCall::fill(theirs.operand(), 9))
        .unwrap_err();
    assert!(
        matches!(error, KernelError::ForeignDevice { role: "dst" }),
        "{error:?}"
    );
    let error = kernels
        .prepare(&KernelCall::move_bytes(theirs.operand(), mine.operand()))
        .unwrap_err();
    assert!(matches!(error, KernelError::ForeignDevice { role: "src" }));
    let result = local.alloc(16).unwrap();
    assert!(matches!(
        kernels.prepare(&KernelCall::checksum(mine.operand(), theirs.operand())),
        Err(KernelError::ForeignDevice { role: "result" })
    ));
    drop(result);

    // Staging.
    let staging =
        StagingPool::new(here.device(), here.queue(), StagingOptions::default()).expect("staging");
    assert!(matches!(
        staging.upload(&theirs, &[1; 4096]),
        Err(StagingError::ForeignDevice { what: "upload" })
    ));
    assert!(matches!(
        staging.download(&theirs),
        Err(StagingError::ForeignDevice { .. })
    ));
    let mut buffer = staging.alloc_staging_buffer(4096).unwrap();
    assert!(matches!(
        buffer.upload_to(&theirs),
        Err(StagingError::ForeignDevice { .. })
    ));
    let mut readback = staging.alloc_readback_buffer(4096).unwrap();
    assert!(matches!(
        staging.download_to_readback(&theirs, &mut readback),
        Err(StagingError::ForeignDevice { .. })
    ));

    // The pool's own transfers and moves.
    assert!(matches!(
        local.write(&theirs, &[1; 4]),
        Err(ReadWriteError::ForeignBlock)
    ));
    assert!(matches!(
        local.read(&theirs),
        Err(ReadWriteError::ForeignBlock)
    ));
    assert!(matches!(
        local.offload(&mut theirs),
        Err(MoveError::ForeignBlock)
    ));

    // Nothing happened to the block.
    assert_eq!(foreign_pool.read(&theirs).unwrap(), vec![3; 4096]);
    drop(theirs);
    foreign_pool.mark_submitted();
    local.mark_submitted();
}
