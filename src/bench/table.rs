//! The human-readable rendering of a [`BenchReport`].

use std::fmt::Write;

use crate::format::bytes;

use super::report::BenchReport;

/// Renders the report as an aligned text table with a header and the move figures.
pub fn render(report: &BenchReport) -> String {
    let mut out = String::new();
    let a = &report.adapter;
    let _ = writeln!(
        out,
        "adapter   {} ({}, {}, {} {})",
        a.name, a.backend, a.device_type, a.driver, a.driver_info
    );
    let _ = writeln!(
        out,
        "operands  {} each; timing: {}; median of {} runs after {} warm-up runs and >= {} ms; seed {:#x}",
        bytes(report.size_bytes),
        report.timing.as_str(),
        report.timed_runs,
        report.warmup_runs,
        report.min_warmup_ms,
        report.seed
    );
    let _ = writeln!(
        out,
        "copy peak {:.1} GB/s read+write (copy f32, raw buffers)",
        report.copy_peak_gbps
    );
    for pool in &report.pools {
        let _ = writeln!(
            out,
            "{:<9} {} memory, conf {} ({})",
            pool.placement, pool.memory_mode, pool.conf, pool.memory_mode_reason
        );
    }
    for omission in &report.omitted {
        let _ = writeln!(out, "not run   {}: {}", omission.what, omission.reason);
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<13} {:<5} {:<6} {:>11} {:>11} {:>9} {:>12} {:>4}  verified",
        "kernel", "dtype", "place", "bytes/run", "GB/s", "% peak", "median", "disp"
    );
    for row in &report.kernels {
        let _ = writeln!(
            out,
            "{:<13} {:<5} {:<6} {:>11} {:>11.1} {:>8.1}% {:>12} {:>4}  {}",
            row.name,
            row.dtype,
            row.placement,
            bytes(row.bytes),
            row.gbps,
            row.pct_of_copy_peak,
            duration(row.median_ns),
            row.dispatches,
            if row.verified { "yes" } else { "NO" }
        );
    }
    let m = &report.moves;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "moves of {} (timing: {}):",
        bytes(m.size_bytes),
        m.timing.as_str()
    );
    let _ = writeln!(
        out,
        "  copy kernel, two buffers      {:>10.1} GB/s",
        m.kernel_gbps
    );
    let _ = writeln!(
        out,
        "  copy kernel, one buffer       {:>10.1} GB/s",
        m.kernel_same_buffer_gbps
    );
    let _ = writeln!(
        out,
        "  copy_buffer_to_buffer         {:>10.1} GB/s",
        m.copy_buffer_gbps
    );
    let _ = writeln!(out, "  kernel / copy_buffer_to_buffer {:>9.2}x", m.ratio);
    out
}

/// `812 ns`, `3.41 us`, `12.30 ms`, `1.20 s`.
fn duration(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}
