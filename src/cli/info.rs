//! `wgpool info`: adapters, limits, features, memory heaps and budget.

use super::Failure;

#[derive(clap::Args)]
pub struct InfoArgs {}

pub fn run(_args: InfoArgs) -> Result<(), Failure> {
    Err(Failure { message: "wgpool info is not built yet".into(), exit_code: 1 })
}
