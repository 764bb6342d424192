//! The `wgpool` command: trace replay, device information and benchmarks.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "wgpool",
    version,
    about = "A cross-vendor GPU memory pool on wgpu"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay an allocation trace through the placement engine (no GPU needed).
    Replay(cli::replay::ReplayArgs),
    /// Print the WGPOOL_CONF option table (Markdown, as in the README).
    Options,
    /// Print the adapters, their limits, features, memory heaps and budget.
    Info(cli::info::InfoArgs),
    /// Benchmark kernels on pool blocks and raw buffers, allocation latency and moves.
    Bench(cli::bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => cli::replay::run(args),
        Command::Info(args) => cli::info::run(args),
        Command::Bench(args) => cli::bench::run(args),
        Command::Options => {
            print!("{}", wgpool::config::options_markdown_table());
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("wgpool: {}", failure.message);
            ExitCode::from(failure.exit_code)
        }
    }
}
