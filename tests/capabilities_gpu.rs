//! What a pool gets on the test device's backend (`BackendCapabilities`), checked against
//! the device itself, and what pools do without each capability: fall back with the stated
//! reason, or refuse with a clear error. Runs on every backend CI tests (lavapipe's Vulkan,
//! llvmpipe's GL); each test asserts the branch the device takes, so a backend without a
//! capability tests the refusal instead of skipping.
//!
//! These tests need an adapter and fail, saying how to install one, when there is none.

mod common;

use wgpool::bench::timing::{Timer, TimingMethod};
use wgpool::config::{CapError, Config};
use wgpool::engine::EngineError;
use wgpool::gpu::sparse::sparse_device;
use wgpool::gpu::{BackendCapabilities, Support};
use wgpool::kernels::{Kernel, Kernels};
use wgpool::pool::{MemoryMode, Pool, PoolError};

#[test]
fn capabilities_describe_the_device_as_it_was_opened() {
    let gpu = common::gpu();
    let caps = gpu.capabilities();
    let features = gpu.features();
    assert_eq!(caps.backend, gpu.info().backend.to_str());
    assert_eq!(
        caps.page_mapping.is_available(),
        sparse_device(gpu.device()).is_ok()
    );
    assert_eq!(
        caps.host_overflow.is_available(),
        features.contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
    );
    assert_eq!(
        caps.timestamps.is_available(),
        features.contains(wgpu::Features::TIMESTAMP_QUERY)
    );
    assert_eq!(
        caps.f16.is_available(),
        features.contains(wgpu::Features::SHADER_F16)
    );
    let memory = gpu.memory_info();
    assert_eq!(caps.memory_heaps.is_available(), memory.is_some());
    assert_eq!(
        caps.memory_budget.is_available(),
        memory.is_some_and(|m| m.budget_supported)
    );
    let limits = gpu.limits();
    let binding = caps.binding_limits;
    assert_eq!(binding.max_buffer_size, limits.max_buffer_size);
    assert_eq!(
        binding.max_storage_buffer_binding_size,
        limits.max_storage_buffer_binding_size
    );
    assert_eq!(
        binding.min_storage_buffer_offset_alignment,
        limits.min_storage_buffer_offset_alignment
    );
    assert_eq!(
        binding.max_storage_buffers_per_shader_stage,
        limits.max_storage_buffers_per_shader_stage
    );
    // What `wgpool info` says of the adapter is what the opened device got.
    let adapter = BackendCapabilities::of_adapter(gpu.adapter());
    for ((name, said), (_, got)) in adapter.rows().into_iter().zip(caps.rows()) {
        assert_eq!(
            said.is_available(),
            got.is_available(),
            "{name}: {said:?} / {got:?}"
        );
    }
    assert_eq!(adapter.binding_limits, caps.binding_limits);
    // Every capability explains itself.
    for (name, support) in caps.rows() {
        assert!(!support.text().is_empty(), "{name}: {support:?}");
    }
}

/// The backends CI runs, pinned: GL has no page mapping, no mappable primary buffers, no f16
/// and no memory query in wgpu 30 or in wgpool; Vulkan always reports its heaps.
#[test]
fn each_backend_states_what_it_lacks() {
    let gpu = common::gpu();
    let caps = gpu.capabilities();
    eprintln!("backend {}: {caps:#?}", caps.backend);
    match gpu.info().backend {
        wgpu::Backend::Gl => {
            let no = |support: &Support, needle: &str| {
                assert!(!support.is_available(), "{support:?}");
                assert!(support.text().contains(needle), "{support:?}");
            };
            no(&caps.page_mapping, "not a Vulkan");
            no(&caps.host_overflow, "MAPPABLE_PRIMARY_BUFFERS");
            no(&caps.f16, "SHADER_F16");
            no(&caps.memory_heaps, "memory_limit_mb");
            no(&caps.memory_budget, "VK_EXT_memory_budget");
        }
        wgpu::Backend::Vulkan => {
            assert!(caps.memory_heaps.is_available(), "{caps:?}");
        }
        other => {
            panic!("this test pins the backends CI runs (Vulkan, GL); add what {other:?} offers")
        }
    }
}

#[test]
fn pools_map_pages_or_fall_back_to_segments_with_the_stated_reason() {
    let gpu = common::gpu();
    let caps = gpu.capabilities();
    let auto = Pool::from_context(gpu, Config::parse("expandable_segments:auto").unwrap()).unwrap();
    let required = Pool::from_context(gpu, Config::parse("expandable_segments:True").unwrap());
    match &caps.page_mapping {
        Support::Yes { .. } => {
            assert_eq!(auto.memory_mode(), MemoryMode::Pages);
            assert_eq!(required.unwrap().memory_mode(), MemoryMode::Pages);
        }
        Support::No { .. } => {
            let why = sparse_device(gpu.device()).unwrap_err().reason;
            assert!(caps.page_mapping.text().contains(&why));
            assert_eq!(auto.memory_mode(), MemoryMode::Segments);
            let reason = auto.memory_mode_reason();
            assert!(
                reason.contains("expandable_segments:auto") && reason.contains(&why),
                "{reason}"
            );
            let error = required.expect_err("pages required where there are none");
            assert!(
                matches!(&error, PoolError::PageMappingUnavailable { reason } if *reason == why),
                "{error:?}"
            );
            assert!(
                error.to_string().contains("expandable_segments:auto"),
                "{error}"
            );
        }
    }
    // Either way the pool serves blocks.
    let block = auto.alloc(4096).unwrap();
    auto.write(&block, &[7; 4096]).unwrap();
    assert_eq!(auto.read(&block).unwrap(), vec![7; 4096]);
}

#[test]
fn host_overflow_works_or_is_refused_as_the_capabilities_say() {
    let gpu = common::gpu();
    let caps = gpu.capabilities();
    let pool = Pool::from_context(
        gpu,
        Config::parse("memory_limit_mb:4,overflow:host,expandable_segments:False").unwrap(),
    );
    if caps.host_overflow.is_available() {
        let pool = pool.unwrap();
        let _device = pool.alloc(3 << 20).unwrap();
        let overflowed = pool.alloc(3 << 20).unwrap();
        assert_eq!(overflowed.residency(), wgpool::pool::Residency::Host);
    } else {
        assert_eq!(pool.err(), Some(PoolError::HostOverflowUnsupported));
    }
}

#[test]
fn a_memory_fraction_caps_the_pool_or_asks_for_a_limit_in_bytes() {
    let gpu = common::gpu();
    let caps = gpu.capabilities();
    let fraction = Pool::from_context(
        gpu,
        Config::parse("per_process_memory_fraction:0.5").unwrap(),
    );
    if caps.memory_heaps.is_available() {
        let total = gpu.memory_info().unwrap().device_local_bytes().unwrap();
        assert_eq!(fraction.unwrap().memory_cap(), Some(total / 2));
    } else {
        let error = fraction.expect_err("a fraction of an unknown size");
        assert!(
            matches!(
                error,
                PoolError::Config(EngineError::Cap(CapError::FractionNeedsDeviceMemory { .. }))
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("memory_limit_mb"), "{error}");
        // The way out the message names works.
        let capped = Pool::from_context(
            gpu,
            Config::parse("per_process_memory_fraction:0.5,memory_limit_mb:64").unwrap(),
        )
        .unwrap();
        assert_eq!(capped.memory_cap(), Some(64 << 20));
    }
}

#[test]
fn f16_kernels_and_gpu_timing_follow_the_capabilities() {
    let gpu = common::gpu();
    let caps = gpu.capabilities();
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    for kernel in [Kernel::CopyF16, Kernel::TriadF16] {
        assert_eq!(
            kernels.supports(kernel),
            caps.f16.is_available(),
            "{kernel:?}"
        );
    }
    let timer = Timer::new(gpu.device(), gpu.queue(), false);
    let expected = if caps.timestamps.is_available() {
        TimingMethod::GpuTimestamps
    } else {
        TimingMethod::Wall
    };
    assert_eq!(timer.pass_method(), expected);
}

/// The README's backend table ("Backends: what the pool gets where") says for the test
/// device what `BackendCapabilities` says: each capability's yes or no in the device's
/// column, and the binding limits. Columns: lavapipe (Vulkan on a CPU), llvmpipe GL, NVIDIA
/// (Vulkan); a device with no column fails, asking for one.
#[test]
fn the_readme_backend_table_matches_the_device() {
    let gpu = common::gpu();
    let caps = gpu.capabilities();
    let info = gpu.info();
    let column = match (caps.backend.as_str(), info.device_type) {
        ("vulkan", wgpu::DeviceType::Cpu) => 1,
        ("gl", _) => 2,
        ("vulkan", _) if info.name.contains("NVIDIA") => 3,
        _ => panic!(
            "the README's backend table has no column for {} on {}: add one",
            info.name, caps.backend
        ),
    };
    let readme = include_str!("../README.md");
    let section = readme
        .split("## Backends: what the pool gets where")
        .nth(1)
        .expect("the README has a Backends section");
    let cell = |capability: &str| -> String {
        let row = section
            .lines()
            .find(|line| line.starts_with(&format!("| `{capability}`")))
            .unwrap_or_else(|| panic!("the backend table has no row for {capability}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // cells[0] is empty (before the first bar), cells[1] names the capability.
        cells[column + 1].to_string()
    };
    for (name, support) in caps.rows() {
        let text = cell(name);
        let says_yes = text.starts_with("yes");
        assert_eq!(
            says_yes,
            support.is_available(),
            "README says {text:?} for {name} in column {column}; wgpool info says {:?}",
            support.text()
        );
    }
    // "2 GiB / 128 MiB / 32 B / 48": sizes to the README's rounding, the rest exactly.
    let limits = cell("binding_limits");
    let parts: Vec<&str> = limits.split(" / ").map(str::trim).collect();
    assert_eq!(parts.len(), 4, "{limits:?}");
    let bytes = |text: &str| -> u64 {
        let (number, unit) = text.split_once(' ').expect("a size and its unit");
        let number: f64 = number.parse().expect("a number");
        let scale = match unit {
            "B" => 1u64,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            other => panic!("unit {other}"),
        };
        (number * scale as f64) as u64
    };
    let near = |readme: u64, device: u64| readme.abs_diff(device) <= readme / 100;
    let device = &caps.binding_limits;
    assert!(
        near(bytes(parts[0]), device.max_buffer_size),
        "{limits:?}: {device:?}"
    );
    assert!(
        near(bytes(parts[1]), device.max_storage_buffer_binding_size),
        "{limits:?}: {device:?}"
    );
    assert_eq!(
        bytes(parts[2]),
        u64::from(device.min_storage_buffer_offset_alignment)
    );
    assert_eq!(
        parts[3].replace(',', "").split(' ').next(),
        Some(
            device
                .max_storage_buffers_per_shader_stage
                .to_string()
                .as_str()
        ),
        "{limits:?}"
    );
}
