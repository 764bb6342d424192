//! `memory_summary`: the statistics as a fixed-width text table.

use super::page_layout::PageStats;
use super::stats::{MemoryStats, Stat, StatArray};
use super::types::MemoryMode;
use crate::config::Config;
use crate::format::bytes;

const WIDTH: usize = 77;

fn rule(ch: char) -> String {
    format!("|{}|\n", ch.to_string().repeat(WIDTH - 2))
}

fn centered(text: &str) -> String {
    format!("|{:^width$}|\n", text, width = WIDTH - 2)
}

fn row(label: &str, stat: &Stat, is_bytes: bool) -> String {
    let cell = |v: u64| if is_bytes { bytes(v) } else { v.to_string() };
    format!(
        "| {:<21} | {:>10} | {:>10} | {:>10} | {:>10} |\n",
        label,
        cell(stat.current),
        cell(stat.peak),
        cell(stat.allocated),
        cell(stat.freed)
    )
}

fn section(out: &mut String, label: &str, array: &StatArray, is_bytes: bool) {
    out.push_str(&row(label, &array.all, is_bytes));
    out.push_str(&row("      from large pool", &array.large_pool, is_bytes));
    out.push_str(&row("      from small pool", &array.small_pool, is_bytes));
    out.push_str(&rule('-'));
}

/// Renders the table: Metric | Cur Usage | Peak Usage | Tot Alloc | Tot Freed.
pub(super) fn render(
    stats: &MemoryStats,
    config: &Config,
    cap: Option<u64>,
    mode: MemoryMode,
    pages: Option<PageStats>,
) -> String {
    let mut out = String::new();
    out.push_str(&rule('='));
    out.push_str(&centered(&format!(
        "wgpool memory summary (policy:{}, memory mode: {})",
        config.policy.name(),
        mode.name()
    )));
    out.push_str(&rule('-'));
    out.push_str(&centered(&format!(
        "out-of-memory errors: {}   retries after releasing the cache: {}",
        stats.num_ooms, stats.num_alloc_retries
    )));
    match pages {
        None => out.push_str(&centered(&format!(
            "cap: {}   segments created: {}   released: {}",
            cap.map(bytes).unwrap_or_else(|| "none".into()),
            stats.num_device_alloc,
            stats.num_device_free
        ))),
        Some(pages) => {
            out.push_str(&centered(&format!(
                "cap: {}   ranges: {} ({} of address space)",
                cap.map(bytes).unwrap_or_else(|| "none".into()),
                pages.ranges,
                bytes(pages.range_bytes)
            )));
            out.push_str(&centered(&format!(
                "pages mapped: {} (peak physical {})   binds: {}",
                bytes(pages.mapped_bytes),
                bytes(pages.physical_peak),
                pages.bind_calls
            )));
            out.push_str(&centered(&format!(
                "mapped over time: {}   unmapped: {}",
                bytes(pages.mapped_total),
                bytes(pages.unmapped_total)
            )));
        }
    }
    out.push_str(&rule('='));
    out.push_str(&format!(
        "| {:<21} | {:>10} | {:>10} | {:>10} | {:>10} |\n",
        "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"
    ));
    out.push_str(&rule('-'));
    section(&mut out, "Allocated memory", &stats.allocated_bytes, true);
    section(&mut out, "Active memory", &stats.active_bytes, true);
    section(&mut out, "Requested memory", &stats.requested_bytes, true);
    section(&mut out, "Reserved memory", &stats.reserved_bytes, true);
    section(
        &mut out,
        "Non-releasable memory",
        &stats.inactive_split_bytes,
        true,
    );
    section(&mut out, "Allocations", &stats.allocation, false);
    section(&mut out, "Active allocs", &stats.active, false);
    section(&mut out, "Reserved segments", &stats.segment, false);
    section(
        &mut out,
        "Non-releasable allocs",
        &stats.inactive_split,
        false,
    );
    out.push_str(&row(
        "Oversize allocations",
        &stats.oversize_allocations,
        false,
    ));
    out.push_str(&rule('-'));
    out.push_str(&row("Oversize segments", &stats.oversize_segments, false));
    out.push_str(&rule('='));
    out
}
