//! `wgpool bench`: kernels on pool blocks and raw buffers, allocation latency, moves.

use super::Failure;

#[derive(clap::Args)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> Result<(), Failure> {
    Err(Failure { message: "wgpool bench is not built yet".into(), exit_code: 1 })
}
