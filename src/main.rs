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
    quiet_window_system_probe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => cli::replay::run(args),
        Command::Info(args) => cli::info::run(args),
        Command::Bench(args) => cli::bench::run(args),
        Command::Options => cli::output::print(&wgpool::config::options_markdown_table()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("wgpool: {}", failure.message);
            }
            ExitCode::from(failure.exit_code)
        }
    }
}

/// Keeps Mesa's Vulkan device-select layer from probing the window system.
///
/// wgpu enables every surface extension the Vulkan loader offers, Wayland's included, even on
/// a headless instance. Mesa's implicit device-select layer sees that and connects to the
/// Wayland display to find the default GPU; with `WAYLAND_DISPLAY` set but no usable
/// `XDG_RUNTIME_DIR` (a container, a CI job, an ssh session) libwayland prints
/// "error: XDG_RUNTIME_DIR is invalid or not set in the environment." once per instance. A
/// headless tool never presents to a display, so it switches the layer off the way the layer
/// documents (`NODEVICE_SELECT=1`), unless the user chose a value. Adapter choice stays
/// with wgpu (`WGPU_ADAPTER_NAME`, `WGPU_POWER_PREF`, `--adapter`).
fn quiet_window_system_probe() {
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: called first thing in `main`, before this process starts any thread, so no
        // other thread can read or write the environment at the same time.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}
