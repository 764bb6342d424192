//! `wgpool info [--json] [--adapter NAME]`: adapters, limits, features, what pools get on
//! each (capabilities), memory heaps and budget.

use serde::Serialize;
use wgpool::format::bytes;
use wgpool::gpu::sparse::{AdapterPageMapping, adapter_page_mapping, describe_address_space};
use wgpool::gpu::{
    AdapterSummary, BackendCapabilities, DeviceMemoryInfo, GpuError, HeadlessOptions,
    create_instance, enumerate_adapters,
};

use super::{Failure, output};
use wgpool::monitor::MemoryReading;

#[derive(clap::Args)]
pub struct InfoArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Only adapters whose name contains this text (case-insensitive).
    #[arg(long, value_name = "NAME")]
    adapter: Option<String>,
    /// Refresh the memory heaps (budget and usage) every --interval-ms until --count
    /// reports or Ctrl-C; with --json, one JSON object per line.
    #[arg(long)]
    watch: bool,
    /// With --watch: stop after N reports.
    #[arg(long, value_name = "N", requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// With --watch: milliseconds between reports (default 1000).
    #[arg(long, value_name = "MS", requires = "watch")]
    interval_ms: Option<u64>,
}

/// The limits that matter for a memory pool and its kernels.
#[derive(Serialize)]
struct KeyLimits {
    max_buffer_size: u64,
    max_storage_buffer_binding_size: u64,
    max_uniform_buffer_binding_size: u64,
    min_storage_buffer_offset_alignment: u32,
    min_uniform_buffer_offset_alignment: u32,
    max_storage_buffers_per_shader_stage: u32,
    max_bind_groups: u32,
    max_compute_workgroups_per_dimension: u32,
    max_compute_invocations_per_workgroup: u32,
    max_compute_workgroup_size_x: u32,
    max_compute_workgroup_storage_size: u32,
    max_immediate_size: u32,
}

impl KeyLimits {
    fn new(l: &wgpu::Limits) -> KeyLimits {
        KeyLimits {
            max_buffer_size: l.max_buffer_size,
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_uniform_buffer_binding_size: l.max_uniform_buffer_binding_size,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
            min_uniform_buffer_offset_alignment: l.min_uniform_buffer_offset_alignment,
            max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
            max_bind_groups: l.max_bind_groups,
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroup_size_x: l.max_compute_workgroup_size_x,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
            max_immediate_size: l.max_immediate_size,
        }
    }

    fn lines(&self) -> Vec<(&'static str, String)> {
        let size = |n: u64| format!("{n} ({})", bytes(n));
        vec![
            ("max_buffer_size", size(self.max_buffer_size)),
            (
                "max_storage_buffer_binding_size",
                size(self.max_storage_buffer_binding_size),
            ),
            (
                "max_uniform_buffer_binding_size",
                size(self.max_uniform_buffer_binding_size),
            ),
            (
                "min_storage_buffer_offset_alignment",
                self.min_storage_buffer_offset_alignment.to_string(),
            ),
            (
                "min_uniform_buffer_offset_alignment",
                self.min_uniform_buffer_offset_alignment.to_string(),
            ),
            (
                "max_storage_buffers_per_shader_stage",
                self.max_storage_buffers_per_shader_stage.to_string(),
            ),
            ("max_bind_groups", self.max_bind_groups.to_string()),
            (
                "max_compute_workgroups_per_dimension",
                self.max_compute_workgroups_per_dimension.to_string(),
            ),
            (
                "max_compute_invocations_per_workgroup",
                self.max_compute_invocations_per_workgroup.to_string(),
            ),
            (
                "max_compute_workgroup_size_x",
                self.max_compute_workgroup_size_x.to_string(),
            ),
            (
                "max_compute_workgroup_storage_size",
                self.max_compute_workgroup_storage_size.to_string(),
            ),
            ("max_immediate_size", self.max_immediate_size.to_string()),
        ]
    }
}

#[derive(Serialize)]
struct MemoryReport {
    #[serde(flatten)]
    info: DeviceMemoryInfo,
    device_local_bytes: Option<u64>,
}

#[derive(Serialize)]
struct AdapterReport {
    index: usize,
    #[serde(flatten)]
    summary: AdapterSummary,
    vendor_id: u32,
    device_id: u32,
    limits: KeyLimits,
    features: Vec<&'static str>,
    /// What pools on a device opened by wgpool get here, and why not.
    capabilities: BackendCapabilities,
    /// `null` off Vulkan (there is no portable memory query).
    memory: Option<MemoryReport>,
    /// Whether pools on a device opened by wgpool map pages, and why not.
    page_mapping: PageMappingReport,
}

/// The memory mode pools get on the adapter (`pages` or `segments`) and why.
#[derive(Serialize)]
struct PageMappingReport {
    mode: &'static str,
    /// What the adapter offers, where it can map pages.
    #[serde(flatten)]
    support: Option<AdapterPageMapping>,
    /// Why pools fall back to fixed segments, where it cannot.
    reason: Option<String>,
}

impl PageMappingReport {
    fn new(adapter: &wgpu::Adapter) -> PageMappingReport {
        match adapter_page_mapping(adapter) {
            Ok(support) => PageMappingReport {
                mode: "pages",
                support: Some(support),
                reason: None,
            },
            Err(why) => PageMappingReport {
                mode: "segments",
                support: None,
                reason: Some(why.reason),
            },
        }
    }
}

#[derive(Serialize)]
struct InfoReport {
    adapters: Vec<AdapterReport>,
}

pub fn run(args: InfoArgs) -> Result<(), Failure> {
    let instance =
        create_instance(&HeadlessOptions::default()).map_err(|e| Failure::gpu(&e, ""))?;
    let adapters = enumerate_adapters(&instance);
    if adapters.is_empty() {
        let backends = std::env::var("WGPU_BACKEND").unwrap_or_else(|_| "all".into());
        return Err(Failure::gpu(&GpuError::NoAdapter { backends }, ""));
    }
    let needle = args.adapter.as_deref().map(str::to_lowercase);
    let reports: Vec<AdapterReport> = adapters
        .iter()
        .enumerate()
        .filter(|(_, a)| {
            needle
                .as_ref()
                .is_none_or(|n| a.get_info().name.to_lowercase().contains(n))
        })
        .map(|(index, adapter)| {
            let info = adapter.get_info();
            AdapterReport {
                index,
                summary: AdapterSummary::new(&info),
                vendor_id: info.vendor,
                device_id: info.device,
                limits: KeyLimits::new(&adapter.limits()),
                features: adapter
                    .features()
                    .iter_names()
                    .map(|(name, _)| name)
                    .collect(),
                capabilities: BackendCapabilities::of_adapter(adapter),
                memory: DeviceMemoryInfo::query(adapter).map(|info| MemoryReport {
                    device_local_bytes: info.device_local_bytes(),
                    info,
                }),
                page_mapping: PageMappingReport::new(adapter),
            }
        })
        .collect();
    if reports.is_empty() {
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        return Err(Failure::bad_input(format!(
            "--adapter {:?} matches no adapter; available: {}",
            args.adapter.unwrap_or_default(),
            names.join(", ")
        )));
    }
    if args.watch {
        let chosen: Vec<&wgpu::Adapter> = reports.iter().map(|r| &adapters[r.index]).collect();
        return watch(&chosen, &args);
    }
    if args.json {
        let report = InfoReport { adapters: reports };
        return output::print_json(&report, "report");
    }
    let mut text = String::new();
    for (n, report) in reports.iter().enumerate() {
        if n > 0 {
            text.push('\n');
        }
        text.push_str(&render_adapter(report));
    }
    output::print(&text)
}

/// `--watch`: the heaps of each chosen adapter, every interval, `--count` times.
fn watch(adapters: &[&wgpu::Adapter], args: &InfoArgs) -> Result<(), Failure> {
    let interval = std::time::Duration::from_millis(args.interval_ms.unwrap_or(1000));
    let mut n = 0u64;
    loop {
        let started = std::time::Instant::now();
        let mut text = String::new();
        for (index, adapter) in adapters.iter().enumerate() {
            let report = MemoryReading::now(adapter, None);
            let info = adapter.get_info();
            let backend = info.backend.to_str();
            if args.json {
                // Two adapters may share a name (one GPU through Vulkan and GL): the index
                // and the backend tell their lines apart.
                #[derive(Serialize)]
                struct Line<'a> {
                    index: usize,
                    adapter: &'a str,
                    backend: &'a str,
                    #[serde(flatten)]
                    report: &'a MemoryReading,
                }
                let line = serde_json::to_string(&Line {
                    index,
                    adapter: &info.name,
                    backend,
                    report: &report,
                })
                .map_err(|e| Failure::internal(format!("cannot encode the report: {e}")))?;
                text.push_str(&line);
                text.push('\n');
            } else {
                text.push_str(&format!(
                    "[{}] adapter {index}: {} ({backend})\n",
                    clock(report.unix_ms),
                    info.name
                ));
                text.push_str(&report.render());
            }
        }
        output::print(&text)?;
        n += 1;
        if args.count.is_some_and(|count| n >= count) {
            return Ok(());
        }
        std::thread::sleep(interval.saturating_sub(started.elapsed()));
    }
}

/// `HH:MM:SS.mmm` (UTC) of a Unix time in milliseconds.
fn clock(unix_ms: u64) -> String {
    let day_ms = unix_ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
}

fn render_adapter(r: &AdapterReport) -> String {
    let mut out = String::new();
    let mut println = |line: String| {
        out.push_str(&line);
        out.push('\n');
    };
    let s = &r.summary;
    println(format!("adapter {}: {}", r.index, s.name));
    println(format!("  backend       {}", s.backend));
    println(format!("  device type   {}", s.device_type));
    println(format!("  driver        {} ({})", s.driver, s.driver_info));
    println(format!(
        "  vendor/device {:#06x} / {:#06x}",
        r.vendor_id, r.device_id
    ));
    println("  limits:".to_string());
    for (name, value) in r.limits.lines() {
        println(format!("    {name:<38} {value}"));
    }
    println(format!("  features ({}):", r.features.len()));
    for chunk in r.features.chunks(3) {
        println(format!("    {}", chunk.join(", ")));
    }
    println("  capabilities (what pools get here):".to_string());
    for (name, support) in r.capabilities.rows() {
        let answer = if support.is_available() { "yes" } else { "no" };
        println(format!("    {name:<15} {answer:<4} {}", support.text()));
    }
    let b = &r.capabilities.binding_limits;
    println(format!(
        "    {:<15} {:<4} buffer {}, storage binding {}, offset alignment {} B, {} storage \
         buffers per stage",
        "binding_limits",
        "",
        bytes(b.max_buffer_size),
        bytes(b.max_storage_buffer_binding_size),
        b.min_storage_buffer_offset_alignment,
        b.max_storage_buffers_per_shader_stage
    ));
    // Into the adapter's own text (it once went straight to stdout, ahead of its adapter).
    match (&r.page_mapping.support, &r.page_mapping.reason) {
        (Some(s), _) => println(format!(
            "  memory mode   pages (Vulkan sparse binding; {}; binds on {})",
            describe_address_space(s.address_space, s.reported_address_space),
            if s.own_bind_queue {
                "a queue of the pool's own"
            } else {
                "wgpu's queue, serialized with its submissions"
            }
        )),
        (None, reason) => println(format!(
            "  memory mode   segments ({})",
            reason.as_deref().unwrap_or("no page mapping")
        )),
    }
    match &r.memory {
        None => println("  memory heaps: not available on this backend".to_string()),
        Some(memory) => {
            let budget = if memory.info.budget_supported {
                "VK_EXT_memory_budget"
            } else {
                "no budget (VK_EXT_memory_budget not supported)"
            };
            println(format!("  memory heaps ({budget}):"));
            for (i, heap) in memory.info.heaps.iter().enumerate() {
                let mut flags = Vec::new();
                if heap.device_local {
                    flags.push("device-local");
                }
                if heap.host_visible {
                    flags.push("host-visible");
                }
                let mut line = format!(
                    "    heap {i}: {:>12}  [{}]",
                    bytes(heap.size),
                    flags.join(", ")
                );
                if let (Some(b), Some(u)) = (heap.budget, heap.usage) {
                    line.push_str(&format!("  budget {}  usage {}", bytes(b), bytes(u)));
                }
                println(line);
            }
            if let Some(total) = memory.device_local_bytes {
                println(format!("    device-local total: {}", bytes(total)));
            }
        }
    }
    out
}
