//! Pool alloc + free of a cached block against `create_buffer` + drop, at a few sizes: the
//! `alloc` figures of `wgpool bench`, with more control.
//!
//! `cargo run --release --example alloc_latency [BATCH] [BATCHES]`

use wgpool::bench::alloc_latency;
use wgpool::gpu::{GpuContext, HeadlessOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u32>());
    let batch = args.next().transpose()?.unwrap_or(5000);
    let batches = args.next().transpose()?.unwrap_or(31);
    let gpu = GpuContext::headless(&HeadlessOptions::default())?;
    println!("adapter: {}", gpu.info().name);
    for size in [4u64 << 10, 1 << 20, 4 << 20, 64 << 20] {
        let r = alloc_latency::measure(&gpu, size, batch, batches, 0)?;
        println!(
            "{:>9}: pool {:6.1} ns   create_buffer + drop {:7.1} ns   speedup {:5.1}x",
            wgpool::format::bytes(size),
            r.pool_ns,
            r.create_buffer_ns,
            r.speedup
        );
    }
    Ok(())
}
