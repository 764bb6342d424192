//! A headless device, a pool, a few blocks, a WGSL kernel on them, read back, and the
//! pool's summary.
//!
//! Run with `cargo run --example quickstart` (software Vulkan works: see the README).

use wgpool::config::Config;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::kernels::{Dtype, KernelCall, Kernels};
use wgpool::pool::Pool;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = GpuContext::headless(&HeadlessOptions::default())?;
    println!("adapter: {} ({:?})", gpu.info().name, gpu.info().backend);

    // WGPOOL_CONF in the environment configures the pool, like PYTORCH_CUDA_ALLOC_CONF.
    let pool = Pool::from_context(&gpu, Config::from_env()?)?;
    let kernels = Kernels::new(gpu.device(), gpu.queue());

    // Three blocks of 1 Mi floats (4 MiB each), large-pool blocks at different offsets of one
    // segment: with fixed segments a 20 MiB buffer; in pages mode (the default where the
    // device maps pages) an address range with pages mapped only where the blocks are.
    let n = 1 << 20;
    let b = pool.alloc(4 * n)?;
    let c = pool.alloc(4 * n)?;
    let a = pool.alloc(4 * n)?;
    let values_b: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let values_c: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    pool.write(&b, bytemuck::cast_slice(&values_b))?;
    pool.write(&c, bytemuck::cast_slice(&values_c))?;

    // STREAM triad on pool blocks: a = b + 3 * c, recorded, then submitted through the pool
    // (a submission point for this thread: blocks it dropped after recording them are freed,
    // and blocks dropped from now on return to the pool at once).
    let mut encoder = gpu.device().create_command_encoder(&Default::default());
    kernels.record(
        &mut encoder,
        &KernelCall::triad(Dtype::F32, b.operand(), c.operand(), 3.0, a.operand()),
    )?;
    pool.submit([encoder.finish()]);
    let result: Vec<f32> = bytemuck::pod_collect_to_vec(&pool.read(&a)?);
    let wrong = (0..n as usize)
        .filter(|&i| result[i] != values_b[i] + 3.0 * values_c[i])
        .count();
    println!("triad on {} floats: {} wrong", n, wrong);
    for (name, block) in [("a", &a), ("b", &b), ("c", &c)] {
        println!(
            "block {name}: segment {} offset {} size {}",
            block.segment().0,
            block.offset(),
            block.size()
        );
    }

    drop((a, b, c));
    print!("{}", pool.memory_summary());
    pool.empty_cache();
    println!(
        "after empty_cache: {} bytes reserved",
        pool.memory_stats().reserved_bytes.all.current
    );
    if wrong > 0 {
        return Err(format!("{wrong} wrong results").into());
    }
    Ok(())
}
