//! Kernels on a real adapter (lavapipe in CI): results against CPU references, on operands
//! at non-zero offsets inside shared buffers, with the bytes around them untouched.
//!
//! These tests need an adapter and fail, saying how to install one, when there is none.

mod common;

use wgpool::bench::half::{f16_bits_from_f32, f32_from_f16_bits};
use wgpool::bench::timing::{RunCounts, Timer, TimingMethod};
use wgpool::gpu::sparse::adapter_page_mapping;
use wgpool::gpu::transfer::{read_region, write_region};
use wgpool::gpu::{GpuContext, HeadlessOptions, Support};
use wgpool::kernels::{
    Access, Dtype, Kernel, KernelCall, KernelError, KernelOptions, Kernels, Operand, checksum,
    pattern_word,
};
use wgpool::pool::MemoryMode;
use wgpool::rng::SplitMix64;

/// Byte value of the guard pattern that fills every buffer before a kernel runs.
const GUARD: u8 = 0xA5;

fn buffer(ctx: &GpuContext, size: u64) -> wgpu::Buffer {
    let buffer = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("test"),
        size,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    write(ctx, &buffer, 0, &vec![GUARD; size as usize]);
    buffer
}

fn write(ctx: &GpuContext, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
    write_region(ctx.device(), ctx.queue(), buffer, offset, data).expect("upload");
}

fn read(ctx: &GpuContext, buffer: &wgpu::Buffer) -> Vec<u8> {
    read_region(ctx.device(), ctx.queue(), buffer, 0, buffer.size()).expect("readback")
}

fn random_f32(seed: u64, count: usize) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..count).map(|_| rng.next_unit_f32()).collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(bytes)
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(bytes)
}

fn assert_close(got: &[f32], want: &[f32], magnitude: &[f32], relative: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, ((&g, &w), &m)) in got.iter().zip(want).zip(magnitude).enumerate() {
        assert!(
            (g - w).abs() <= relative * m.max(f32::MIN_POSITIVE),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// Checks that every byte of `bytes` outside `ranges` still holds the guard pattern.
fn assert_guard_outside(bytes: &[u8], ranges: &[(u64, u64)], what: &str) {
    for (i, &b) in bytes.iter().enumerate() {
        let inside = ranges
            .iter()
            .any(|&(offset, size)| (i as u64) >= offset && (i as u64) < offset + size);
        if !inside {
            assert_eq!(
                b, GUARD,
                "{what}: byte {i} outside the operands was changed"
            );
        }
    }
}

/// Operand layout inside one shared buffer: `count` operands of `size` bytes, the first at
/// 512, each next one 512-aligned after a gap of at least 512 bytes of guard.
fn layout(count: usize, size: u64) -> (Vec<u64>, u64) {
    let stride = (size + 512).div_ceil(512) * 512 + 512;
    let offsets: Vec<u64> = (0..count as u64).map(|i| 512 + i * stride).collect();
    let total = offsets.last().copied().unwrap_or(0) + size + 512;
    (offsets, total)
}

/// Element counts that exercise the vec4 bulk plus every tail length (0 to 3 words).
const F32_COUNTS: [usize; 4] = [4096, 4097, 4098, 1027];

#[test]
fn stream_f32_kernels_in_one_shared_buffer_match_the_cpu() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    for count in F32_COUNTS {
        let size = count as u64 * 4;
        let (offsets, total) = layout(3, size);
        let shared = buffer(ctx, total);
        let op = |i: usize| Operand::new(&shared, offsets[i], size);
        let x = random_f32(1, count);
        let y = random_f32(2, count);
        let put =
            |i: usize, data: &[f32]| write(ctx, &shared, offsets[i], bytemuck::cast_slice(data));
        let get = |i: usize| {
            let all = read(ctx, &shared);
            let start = offsets[i] as usize;
            (f32s(&all[start..start + size as usize]), all)
        };
        let ranges: Vec<(u64, u64)> = offsets.iter().map(|&o| (o, size)).collect();
        let s = 0.75f32;

        // copy: c = a
        put(0, &x);
        kernels
            .run(&KernelCall::copy(Dtype::F32, op(0), op(1)))
            .expect("copy");
        let (c, all) = get(1);
        assert_eq!(c, x, "copy, {count} elements");
        assert_guard_outside(&all, &ranges, "copy");

        // scale: b = s * c
        put(0, &x);
        kernels
            .run(&KernelCall::scale(op(0), s, op(1)))
            .expect("scale");
        let want: Vec<f32> = x.iter().map(|v| s * v).collect();
        let (b, all) = get(1);
        assert_eq!(b, want, "scale, {count} elements");
        assert_guard_outside(&all, &ranges, "scale");

        // add: c = a + b
        put(0, &x);
        put(1, &y);
        kernels
            .run(&KernelCall::add(op(0), op(1), op(2)))
            .expect("add");
        let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
        let (c, all) = get(2);
        assert_eq!(c, want, "add, {count} elements");
        assert_guard_outside(&all, &ranges, "add");

        // triad: a = b + s * c (the device may fuse the multiply-add)
        put(0, &x);
        put(1, &y);
        kernels
            .run(&KernelCall::triad(Dtype::F32, op(0), op(1), s, op(2)))
            .expect("triad");
        let want: Vec<f32> = x.iter().zip(&y).map(|(b, c)| b + s * c).collect();
        let magnitude: Vec<f32> = x
            .iter()
            .zip(&y)
            .map(|(b, c)| b.abs() + (s * c).abs())
            .collect();
        let (a, all) = get(2);
        assert_close(&a, &want, &magnitude, 2.0 * f32::EPSILON, "triad");
        assert_guard_outside(&all, &ranges, "triad");
    }
}

#[test]
fn inputs_sharing_the_output_buffer_compile_read_write_and_separate_buffers_read_only() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    let shared = buffer(ctx, 8192);
    let other = buffer(ctx, 8192);
    let same = kernels
        .prepare(&KernelCall::copy(
            Dtype::F32,
            Operand::new(&shared, 512, 1024),
            Operand::new(&shared, 2048, 1024),
        ))
        .expect("prepare");
    assert_eq!(same.access(), Access::ReadWriteInputs);
    let separate = kernels
        .prepare(&KernelCall::copy(
            Dtype::F32,
            Operand::new(&shared, 512, 1024),
            Operand::new(&other, 512, 1024),
        ))
        .expect("prepare");
    assert_eq!(separate.access(), Access::ReadOnlyInputs);
}

#[test]
fn scale_in_place_on_the_same_range_is_allowed_and_correct() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    let shared = buffer(ctx, 4096);
    let x = random_f32(3, 255);
    write(ctx, &shared, 1024, bytemuck::cast_slice(&x));
    let block = Operand::new(&shared, 1024, 255 * 4);
    kernels
        .run(&KernelCall::scale(block, -2.0, block))
        .expect("in-place scale");
    let all = read(ctx, &shared);
    let want: Vec<f32> = x.iter().map(|v| -2.0 * v).collect();
    assert_eq!(f32s(&all[1024..1024 + 255 * 4]), want);
    assert_guard_outside(&all, &[(1024, 255 * 4)], "in-place scale");
}

#[test]
fn fill_and_fill_pattern_write_exactly_their_operand() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    for words_count in [1usize, 3, 4, 1001, 4096] {
        let size = words_count as u64 * 4;
        let shared = buffer(ctx, size + 2048);
        let block = Operand::new(&shared, 1024, size);
        kernels
            .run(&KernelCall::fill(block, 1.5f32.to_bits()))
            .expect("fill");
        let all = read(ctx, &shared);
        let got = words(&all[1024..1024 + size as usize]);
        assert!(
            got.iter().all(|&w| w == 1.5f32.to_bits()),
            "fill of {words_count} words"
        );
        assert_guard_outside(&all, &[(1024, size)], "fill");

        kernels
            .run(&KernelCall::fill_pattern(block, 77))
            .expect("fill_pattern");
        let all = read(ctx, &shared);
        let got = words(&all[1024..1024 + size as usize]);
        let want: Vec<u32> = (0..words_count as u32)
            .map(|i| pattern_word(77, i))
            .collect();
        assert_eq!(got, want, "fill_pattern of {words_count} words");
        assert_guard_outside(&all, &[(1024, size)], "fill_pattern");
    }
}

#[test]
fn checksum_and_compare_match_the_cpu() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    let count = 5003usize;
    let size = count as u64 * 4;
    let (offsets, total) = layout(2, size);
    let shared = buffer(ctx, total);
    let mut rng = SplitMix64::new(9);
    let data: Vec<u32> = (0..count).map(|_| rng.next_u64() as u32).collect();
    write(ctx, &shared, offsets[0], bytemuck::cast_slice(&data));
    let mut changed = data.clone();
    for &i in &[0usize, 17, 4999, 5000, 5002] {
        changed[i] ^= 1 << (i % 32);
    }
    write(ctx, &shared, offsets[1], bytemuck::cast_slice(&changed));
    let x = Operand::new(&shared, offsets[0], size);
    let y = Operand::new(&shared, offsets[1], size);
    assert_eq!(kernels.checksum(x).expect("checksum"), checksum(&data, 0));
    assert_ne!(kernels.checksum(y).expect("checksum"), checksum(&data, 0));
    assert_eq!(kernels.count_mismatches(x, y).expect("compare"), 5);
    assert_eq!(kernels.count_mismatches(x, x).expect("compare"), 0);
    // Swapping two words keeps a plain sum but not this checksum.
    let mut swapped = data.clone();
    swapped.swap(10, 11);
    assert_ne!(checksum(&swapped, 0), checksum(&data, 0));
}

#[test]
fn moves_within_one_buffer_and_between_buffers_are_exact() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    let size = 64 * 1024 + 12; // vec4 bulk plus a 3-word tail
    let mut rng = SplitMix64::new(5);
    let data: Vec<u8> = (0..size).map(|_| rng.next_u64() as u8).collect();

    let segment = buffer(ctx, 256 * 1024);
    write(ctx, &segment, 512, &data);
    kernels
        .move_bytes(
            Operand::new(&segment, 512, size),
            Operand::new(&segment, 128 * 1024, size),
        )
        .expect("move inside one buffer");
    let all = read(ctx, &segment);
    assert_eq!(&all[128 * 1024..128 * 1024 + size as usize], &data[..]);
    assert_eq!(
        &all[512..512 + size as usize],
        &data[..],
        "source unchanged"
    );
    assert_guard_outside(
        &all,
        &[(512, size), (128 * 1024, size)],
        "move inside one buffer",
    );

    let other = buffer(ctx, 128 * 1024);
    kernels
        .move_bytes(
            Operand::new(&segment, 128 * 1024, size),
            Operand::new(&other, 1536, size),
        )
        .expect("move between buffers");
    let all = read(ctx, &other);
    assert_eq!(&all[1536..1536 + size as usize], &data[..]);
    assert_guard_outside(&all, &[(1536, size)], "move between buffers");
}

#[test]
fn operands_larger_than_the_binding_window_are_processed_fully() {
    let ctx = common::gpu();
    let granule = u64::from(ctx.limits().min_storage_buffer_offset_alignment).max(16);
    let window = 4 * granule.max(256);
    let kernels = Kernels::with_options(
        ctx.device(),
        ctx.queue(),
        // One workgroup: the grid-stride loop must cover the rest.
        KernelOptions::default()
            .with_max_window_bytes(window)
            .with_max_workgroups(1),
    )
    .expect("small window");
    assert_eq!(kernels.window_bytes(), window);
    // 10.x windows, ending in a 4-byte remainder that borrows from the window before.
    let count = (10 * window / 4 + 1) as usize;
    let size = count as u64 * 4;
    let (offsets, total) = layout(3, size);
    let shared = buffer(ctx, total);
    let op = |i: usize| Operand::new(&shared, offsets[i], size);
    let ranges: Vec<(u64, u64)> = offsets.iter().map(|&o| (o, size)).collect();
    let x = random_f32(11, count);
    let y = random_f32(12, count);
    write(ctx, &shared, offsets[0], bytemuck::cast_slice(&x));
    write(ctx, &shared, offsets[1], bytemuck::cast_slice(&y));

    let prepared = kernels
        .prepare(&KernelCall::add(op(0), op(1), op(2)))
        .expect("add");
    assert_eq!(prepared.dispatches(), 11);
    kernels.submit(&prepared).expect("submit");
    let all = read(ctx, &shared);
    let start = offsets[2] as usize;
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    assert_eq!(
        f32s(&all[start..start + size as usize]),
        want,
        "windowed add"
    );
    assert_guard_outside(&all, &ranges, "windowed add");

    kernels
        .run(&KernelCall::fill_pattern(op(2), 3))
        .expect("pattern");
    let all = read(ctx, &shared);
    let got = words(&all[start..start + size as usize]);
    let want: Vec<u32> = (0..count as u32).map(|i| pattern_word(3, i)).collect();
    assert_eq!(got, want, "windowed fill_pattern keeps global word indices");
    assert_eq!(
        kernels.checksum(op(2)).expect("checksum"),
        checksum(&want, 0),
        "windowed checksum"
    );
    assert_eq!(kernels.count_mismatches(op(0), op(0)).expect("compare"), 0);

    kernels.move_bytes(op(2), op(1)).expect("windowed move");
    assert_eq!(kernels.count_mismatches(op(1), op(2)).expect("compare"), 0);
    let all = read(ctx, &shared);
    assert_guard_outside(&all, &ranges, "windowed move");
}

#[test]
fn f16_copy_and_triad_match_the_cpu_when_the_device_has_shader_f16() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    if !ctx.features().contains(wgpu::Features::SHADER_F16) {
        // The refusal is the behaviour to check on such devices.
        let shared = buffer(ctx, 4096);
        let err = kernels
            .prepare(&KernelCall::copy(
                Dtype::F16,
                Operand::new(&shared, 0, 64),
                Operand::new(&shared, 512, 64),
            ))
            .expect_err("f16 without SHADER_F16 must be refused");
        assert!(matches!(err, KernelError::Unsupported { .. }), "{err}");
        eprintln!(
            "note: {} has no SHADER_F16; checked the refusal only",
            ctx.info().name
        );
        return;
    }
    let count = 2046usize; // 511 vec4 plus a 2-element tail
    let size = count as u64 * 2;
    let (offsets, total) = layout(3, size);
    let shared = buffer(ctx, total);
    let op = |i: usize| Operand::new(&shared, offsets[i], size);
    let mut rng = SplitMix64::new(21);
    let b: Vec<u16> = (0..count)
        .map(|_| f16_bits_from_f32(rng.next_unit_f32()))
        .collect();
    let c: Vec<u16> = (0..count)
        .map(|_| f16_bits_from_f32(rng.next_unit_f32()))
        .collect();
    write(ctx, &shared, offsets[0], bytemuck::cast_slice(&b));
    write(ctx, &shared, offsets[1], bytemuck::cast_slice(&c));
    let ranges: Vec<(u64, u64)> = offsets.iter().map(|&o| (o, size)).collect();

    kernels
        .run(&KernelCall::copy(Dtype::F16, op(0), op(2)))
        .expect("copy f16");
    let all = read(ctx, &shared);
    let start = offsets[2] as usize;
    let got: Vec<u16> = bytemuck::pod_collect_to_vec(&all[start..start + size as usize]);
    assert_eq!(got, b, "copy f16");
    assert_guard_outside(&all, &ranges, "copy f16");

    let s = 0.5f32;
    kernels
        .run(&KernelCall::triad(Dtype::F16, op(0), op(1), s, op(2)))
        .expect("triad f16");
    let all = read(ctx, &shared);
    let got: Vec<f32> = bytemuck::pod_collect_to_vec::<u8, u16>(&all[start..start + size as usize])
        .into_iter()
        .map(f32_from_f16_bits)
        .collect();
    let (want, magnitude): (Vec<f32>, Vec<f32>) = b
        .iter()
        .zip(&c)
        .map(|(&b, &c)| {
            let (b, c) = (f32_from_f16_bits(b), f32_from_f16_bits(c));
            (b + s * c, b.abs() + (s * c).abs())
        })
        .unzip();
    // f16 has 11 significant bits; allow two roundings.
    assert_close(&got, &want, &magnitude, 2.0 / 1024.0, "triad f16");
    assert_guard_outside(&all, &ranges, "triad f16");
}

#[test]
fn bad_operands_are_refused_with_errors_naming_the_operand() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    let shared = buffer(ctx, 8192);
    let alignment = kernels.offset_alignment();
    let op = |offset, size| Operand::new(&shared, offset, size);

    let err = kernels
        .prepare(&KernelCall::copy(Dtype::F32, op(4, 64), op(4096, 64)))
        .expect_err("misaligned");
    assert!(
        matches!(
            err,
            KernelError::Misaligned {
                role: "a",
                offset: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains(&alignment.to_string()), "{err}");

    let err = kernels
        .prepare(&KernelCall::copy(Dtype::F32, op(0, 62), op(4096, 62)))
        .expect_err("size");
    assert!(
        matches!(
            err,
            KernelError::BadSize {
                role: "a",
                size: 62
            }
        ),
        "{err}"
    );

    let err = kernels
        .prepare(&KernelCall::copy(Dtype::F32, op(0, 64), op(8192, 64)))
        .expect_err("range");
    assert!(
        matches!(err, KernelError::OutOfRange { role: "c", .. }),
        "{err}"
    );

    let err = kernels
        .prepare(&KernelCall::add(op(0, 64), op(512, 128), op(4096, 64)))
        .expect_err("sizes");
    assert!(
        matches!(err, KernelError::SizeMismatch { role: "b", .. }),
        "{err}"
    );

    let err = kernels
        .prepare(&KernelCall::move_bytes(op(0, 1024), op(512, 1024)))
        .expect_err("overlap");
    assert!(
        matches!(
            err,
            KernelError::Overlap {
                first: "src",
                second: "dst",
                ..
            }
        ),
        "{err}"
    );

    let err = kernels
        .prepare(&KernelCall::move_bytes(op(0, 1024), op(0, 1024)))
        .expect_err("same range");
    assert!(matches!(err, KernelError::Overlap { .. }), "{err}");

    let err = kernels
        .prepare(&KernelCall::scale(op(0, 1024), 2.0, op(512, 1024)))
        .expect_err("partial overlap");
    assert!(
        matches!(
            err,
            KernelError::Overlap {
                first: "c",
                second: "b",
                ..
            }
        ),
        "{err}"
    );

    let err = kernels
        .prepare(&KernelCall::triad(
            Dtype::U32,
            op(0, 64),
            op(512, 64),
            1.0,
            op(1024, 64),
        ))
        .expect_err("dtype");
    assert!(
        matches!(
            err,
            KernelError::NoSuchDtype {
                kernel: "triad",
                dtype: "u32",
                ..
            }
        ),
        "{err}"
    );

    let uniform_only = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 1024,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: false,
    });
    let err = kernels
        .prepare(&KernelCall::fill(Operand::whole(&uniform_only), 0))
        .expect_err("usage");
    assert!(
        matches!(err, KernelError::MissingUsage { role: "dst", .. }),
        "{err}"
    );

    let err = kernels
        .prepare(&KernelCall::checksum(op(0, 64), op(32, 4)))
        .expect_err("result overlap");
    assert!(
        matches!(
            err,
            KernelError::Overlap {
                second: "result",
                ..
            }
        ),
        "{err}"
    );

    let err = Kernels::with_options(
        ctx.device(),
        ctx.queue(),
        KernelOptions::default().with_max_window_bytes(16),
    )
    .expect_err("tiny window");
    assert!(
        matches!(
            err,
            KernelError::BadOption {
                name: "max_window_bytes",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        ctx.errors().take_errors().is_empty(),
        "refusals must not reach wgpu"
    );
}

#[test]
fn empty_operands_do_nothing_and_reduce_to_zero() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    let shared = buffer(ctx, 1024);
    let empty = Operand::new(&shared, 512, 0);
    kernels
        .run(&KernelCall::fill(empty, 0))
        .expect("empty fill");
    assert_eq!(kernels.checksum(empty).expect("empty checksum"), 0);
    assert!(read(ctx, &shared).iter().all(|&b| b == GUARD));
}

#[test]
fn timer_returns_positive_samples_for_every_timed_run() {
    let ctx = common::gpu();
    let kernels = Kernels::new(ctx.device(), ctx.queue());
    let shared = buffer(ctx, 1 << 20);
    let prepared = kernels
        .prepare(&KernelCall::move_bytes(
            Operand::new(&shared, 0, 1 << 19),
            Operand::new(&shared, 1 << 19, 1 << 19),
        ))
        .expect("prepare");
    let timer = Timer::new(ctx.device(), ctx.queue(), false);
    let counts = RunCounts::new(1, 10);
    let measured = timer
        .measure_pass(counts, |encoder, writes| prepared.record(encoder, writes))
        .expect("measure");
    assert_eq!(measured.samples_ns.len(), 10);
    assert!(measured.samples_ns.iter().all(|&ns| ns > 0.0));
    assert!(measured.median_ns > 0.0);
    let started = std::time::Instant::now();
    let slow_warmup = RunCounts {
        min_warmup: std::time::Duration::from_millis(60),
        ..RunCounts::new(0, 10)
    };
    timer
        .measure_pass(slow_warmup, |encoder, writes| {
            prepared.record(encoder, writes)
        })
        .expect("measure with a timed warm-up");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(60),
        "warm-up kept its minimum time"
    );
    let wall = Timer::new(ctx.device(), ctx.queue(), true);
    assert_eq!(wall.pass_method(), TimingMethod::Wall);
    let measured = wall
        .measure_commands(counts, |encoder| prepared.record(encoder, None))
        .expect("wall");
    assert_eq!(measured.method, TimingMethod::Wall);
    assert_eq!(measured.samples_ns.len(), 10);
    assert!(ctx.errors().take_errors().is_empty());
}

#[test]
fn vulkan_adapters_report_memory_heaps() {
    let ctx = common::gpu();
    let info = ctx.memory_info();
    if ctx.info().backend != wgpu::Backend::Vulkan {
        assert!(info.is_none(), "memory info is Vulkan-only");
        return;
    }
    let info = info.expect("Vulkan adapters report heaps");
    assert!(!info.heaps.is_empty());
    assert!(info.heaps.iter().all(|h| h.size > 0));
    assert!(info.device_local_bytes().is_some_and(|b| b > 0));
    for heap in &info.heaps {
        assert_eq!(heap.budget.is_some(), info.budget_supported);
        assert_eq!(heap.usage.is_some(), info.budget_supported);
    }
}

#[test]
fn unknown_adapter_name_is_an_error_listing_the_adapters() {
    // An instance and its adapters, created while no test creates a device.
    let err = common::own(|| {
        GpuContext::headless(&HeadlessOptions::default().with_adapter_name("no such adapter 7f3a"))
            .expect_err("no adapter has that name")
    });
    let text = err.to_string();
    assert!(text.contains("no such adapter 7f3a"), "{text}");
    assert!(text.contains("available adapters"), "{text}");
    let _ = Kernel::ALL;
}

// The benchmark driver and the command line, on the same adapter.

#[test]
fn bench_verifies_and_reports_every_kernel_on_raw_and_pool_placements() {
    use wgpool::bench::{BenchConfig, default_placements, run_bench};
    let ctx = common::gpu();
    let config = BenchConfig {
        size_bytes: 64 * 1024 + 48, // not a power of two: exercises the tails too
        counts: RunCounts::new(1, 10),
        force_wall: false,
        seed: 99,
        kernels: None,
        kernel_options: KernelOptions::default(),
    };
    let mut steps = 0;
    let mut operand_placements = default_placements(ctx).expect("placements");
    let placements = operand_placements.len();
    // raw and pool, and host where kernels can bind host memory (lavapipe and NVIDIA; not GL).
    let caps = ctx.capabilities();
    let host = caps.host_overflow.is_available();
    assert_eq!(
        placements,
        2 + usize::from(host),
        "{:?}",
        caps.host_overflow
    );
    let report = run_bench(ctx, &config, &mut operand_placements, &mut |event| {
        if let wgpool::bench::BenchEvent::Step { .. } = event {
            steps += 1;
        }
    })
    .expect("bench on the test adapter");
    let supported = Kernels::new(ctx.device(), ctx.queue()).supported().len() - 1; // not move
    assert_eq!(report.kernels.len(), placements * supported);
    assert_eq!(steps, placements * supported + 3);
    // The report says what the pool placements ran: pages by default where the device maps
    // them (lavapipe 25, NVIDIA), fixed segments elsewhere (GL), with the reason.
    let pools: Vec<(&str, MemoryMode)> = report
        .pools
        .iter()
        .map(|p| (p.placement.as_str(), p.memory_mode))
        .collect();
    let mode = if caps.page_mapping.is_available() {
        MemoryMode::Pages
    } else {
        MemoryMode::Segments
    };
    assert_eq!(
        pools,
        [("pool", mode), ("host", mode)][..1 + usize::from(host)]
    );
    let reason = match &caps.page_mapping {
        Support::Yes { .. } => "sparse binding".to_string(),
        Support::No { .. } => ctx.page_mapping().unwrap_err().reason,
    };
    for pool in &report.pools {
        assert_eq!(pool.conf, wgpool::bench::DEFAULT_POOL_CONF);
        assert!(pool.memory_mode_reason.contains(&reason), "{pool:?}");
    }
    // What the device's capabilities kept out is named, with the capability's reason.
    let mut omitted = Vec::new();
    if !caps.f16.is_available() {
        omitted.push(wgpool::bench::Omission {
            what: "kernels copy_f16, triad_f16".into(),
            reason: caps.f16.text().into(),
        });
    }
    if !host {
        omitted.push(wgpool::bench::Omission {
            what: "placement host".into(),
            reason: caps.host_overflow.text().into(),
        });
    }
    assert_eq!(report.omitted, omitted);
    for row in &report.kernels {
        assert!(
            row.verified && row.gbps > 0.0 && row.median_ns > 0.0,
            "{row:?}"
        );
        // Host operands share one host segment buffer (they are blocks of the small kind at this
        // size): inputs are then declared read_write, but only kernels that read and write
        // data operands need it (the result word is separate). So do pool operands in fixed
        // segments (GL). Operands of a pool in pages mode reach their range through wrappers of
        // their own, so they stay read-only.
        let reads_and_writes = ["copy", "scale", "add", "triad"].contains(&row.name.as_str());
        let shared_buffer =
            row.placement == "host" || (row.placement == "pool" && mode == MemoryMode::Segments);
        let expected_access = if shared_buffer && reads_and_writes {
            "read_write"
        } else {
            "read_only"
        };
        assert_eq!(row.input_access, expected_access, "{row:?}");
    }
    let copy = report
        .kernels
        .iter()
        .find(|r| r.name == "copy" && r.dtype == "f32" && r.placement == "raw")
        .expect("raw copy row");
    assert!((copy.pct_of_copy_peak - 100.0).abs() < 1e-9, "{copy:?}");
    assert_eq!(copy.bytes, 2 * config.size_bytes);
    assert!(
        report.moves.verified
            && report.moves.kernel_gbps > 0.0
            && report.moves.copy_buffer_gbps > 0.0
    );
    let json: serde_json::Value = serde_json::to_value(&report).expect("serializes");
    for key in [
        "adapter",
        "timing",
        "size_bytes",
        "pools",
        "kernels",
        "omitted",
        "moves",
        "alloc",
    ] {
        assert!(json.get(key).is_some(), "report JSON lacks {key}");
    }
    assert_eq!(
        json["pools"][0]["memory_mode"],
        if mode == MemoryMode::Pages {
            "pages"
        } else {
            "segments"
        }
    );
    assert!(json["alloc"].is_null());
    for key in ["name", "backend", "device_type", "driver", "driver_info"] {
        assert!(json["adapter"][key].is_string(), "adapter.{key}");
    }
    assert!(matches!(
        json["timing"].as_str(),
        Some("gpu_timestamps" | "wall")
    ));
    for key in [
        "name",
        "dtype",
        "placement",
        "bytes",
        "gbps",
        "pct_of_copy_peak",
        "verified",
        "median_ns",
    ] {
        assert!(json["kernels"][0].get(key).is_some(), "kernels[].{key}");
    }
    for key in ["kernel_gbps", "copy_buffer_gbps", "ratio"] {
        assert!(json["moves"][key].is_number(), "moves.{key}");
    }
}

fn wgpool(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .args(args)
        .output()
        .expect("run wgpool")
}

/// The command succeeded; otherwise fails with its stderr.
fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 13: a headless run printed libwayland's "XDG_RUNTIME_DIR is invalid" once per
/// instance when `WAYLAND_DISPLAY` was set without a runtime directory (Mesa's device-select
/// layer probing the display).
#[test]
fn cli_runs_quietly_without_a_window_system() {
    let _ = common::gpu();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .args(["info"])
        .env("WAYLAND_DISPLAY", "wayland-0")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("NODEVICE_SELECT")
        .output()
        .expect("run wgpool");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr, "", "a headless run prints nothing on stderr");
}

#[test]
fn cli_rejects_bad_bench_and_info_input_with_exit_code_2() {
    let _ = common::gpu(); // fail with the install hint, not an odd exit code, when there is no adapter
    for (args, needle) in [
        (&["bench", "--runs", "3"][..], "at least 10"),
        (&["bench", "--size-mb", "0"][..], "--size-mb 0"),
        (&["bench", "--kernels", "copy_f64"][..], "copy_f32"),
        (
            &["bench", "--adapter", "no such adapter 7f3a"][..],
            "available adapters",
        ),
        (
            &["bench", "--max-workgroups", "0", "--size-mb", "1"][..],
            "max_workgroups",
        ),
        (
            &["info", "--adapter", "no such adapter 7f3a"][..],
            "matches no adapter",
        ),
        (&["bench", "--conf", "policy:fastest"][..], "--conf"),
        (&["bench", "--warmup-ms", "600001"][..], "--warmup-ms"),
        // Refused before the kernels run: here in under a second, where after them it took
        // minutes on lavapipe.
        (
            &[
                "bench",
                "--oversubscription",
                "--size-mb",
                "1",
                "--budget-mb",
                "1",
            ][..],
            "fewer than four blocks",
        ),
        (&["info", "--watch", "--count", "0"][..], "--count"),
    ] {
        let out = wgpool(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "wgpool {args:?}: {stderr}");
        assert!(stderr.contains(needle), "wgpool {args:?}: {stderr}");
    }
}

#[test]
fn cli_info_json_lists_adapters_with_limits_and_memory() {
    let ctx = common::gpu();
    let out = wgpool(&["info", "--json"]);
    assert_ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("info --json is JSON");
    let adapters = json["adapters"].as_array().expect("adapters array");
    let mine = adapters
        .iter()
        .find(|a| a["name"] == ctx.info().name.as_str())
        .expect("the test adapter is listed");
    assert_eq!(
        mine["limits"]["max_storage_buffer_binding_size"].as_u64(),
        Some(ctx.limits().max_storage_buffer_binding_size)
    );
    assert!(mine["features"].as_array().is_some_and(|f| !f.is_empty()));
    // The memory mode pools get there: pages on lavapipe 25 and NVIDIA, segments on GL.
    match ctx.page_mapping() {
        Ok(sparse) => {
            let facts = sparse.facts();
            assert_eq!(mine["page_mapping"]["mode"], "pages");
            assert_eq!(
                mine["page_mapping"]["address_space"].as_u64(),
                Some(facts.address_space)
            );
            assert_eq!(
                mine["page_mapping"]["own_bind_queue"].as_bool(),
                Some(facts.own_queue)
            );
        }
        Err(_) => {
            // The adapter's reason: `info` opens no device.
            let why = adapter_page_mapping(ctx.adapter()).unwrap_err();
            assert_eq!(mine["page_mapping"]["mode"], "segments");
            assert_eq!(mine["page_mapping"]["reason"], why.reason.as_str());
        }
    }
    // The capabilities are the device's, as the library states them.
    let caps = serde_json::to_value(ctx.capabilities()).unwrap();
    for key in [
        "backend",
        "page_mapping",
        "host_overflow",
        "timestamps",
        "f16",
        "memory_heaps",
        "memory_budget",
        "binding_limits",
    ] {
        assert_eq!(
            mine["capabilities"][key]["available"], caps[key]["available"],
            "capabilities.{key}"
        );
    }
    assert_eq!(
        mine["capabilities"]["binding_limits"],
        caps["binding_limits"]
    );
    assert_eq!(mine["capabilities"]["backend"], caps["backend"]);
    if ctx.info().backend == wgpu::Backend::Vulkan {
        assert!(
            mine["memory"]["heaps"]
                .as_array()
                .is_some_and(|h| !h.is_empty())
        );
        assert!(
            mine["memory"]["device_local_bytes"]
                .as_u64()
                .is_some_and(|b| b > 0)
        );
    }
}

/// The text report names the memory mode inside each adapter's section, after its features.
#[test]
fn cli_info_names_the_memory_mode_of_each_adapter() {
    let ctx = common::gpu();
    // By name and backend: Mesa's Vulkan and GL adapters share the name `llvmpipe (...)`, so
    // without `WGPU_BACKEND` the name alone would list both.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .args(["info", "--adapter", &ctx.info().name])
        .env("WGPU_BACKEND", ctx.info().backend.to_str())
        .output()
        .expect("run wgpool");
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.find("adapter ").expect("an adapter section");
    let features = text.find("  features (").expect("a feature list");
    let line = match ctx.page_mapping() {
        Ok(sparse) => format!(
            "  memory mode   pages (Vulkan sparse binding; {} address space",
            wgpool::format::bytes(sparse.facts().address_space)
        ),
        Err(_) => format!(
            "  memory mode   segments ({})",
            adapter_page_mapping(ctx.adapter()).unwrap_err().reason
        ),
    };
    let mode = text
        .find(&line)
        .unwrap_or_else(|| panic!("{line:?} is missing:\n{text}"));
    assert!(header < features && features < mode, "{text}");
    assert_eq!(text.matches("memory mode").count(), 1, "{text}");
    // Each capability on a line of its own, between the features and the memory mode.
    let section = text
        .find("  capabilities (what pools get here):")
        .expect("a capabilities section");
    assert!(features < section && section < mode, "{text}");
    for (name, support) in ctx.capabilities().rows() {
        let answer = if support.is_available() { "yes" } else { "no " };
        let row = format!("    {name:<15} {answer}");
        assert!(text.contains(&row), "{row:?} is missing:\n{text}");
    }
}

#[test]
fn cli_bench_kernels_subset_prints_a_table() {
    let _ = common::gpu();
    let out = wgpool(&[
        "bench",
        "--quick",
        "--size-mb",
        "1",
        "--kernels",
        "copy_f32,checksum_u32",
        "--seed",
        "5",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ok(&out);
    let rows = |name: &str| {
        stdout
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(name) && l.contains(" yes"))
            .count()
    };
    // raw, pool and, where kernels can bind host memory (lavapipe, not GL), host placements.
    let caps = common::gpu().capabilities();
    let placements = 2 + usize::from(caps.host_overflow.is_available());
    assert_eq!(rows("copy"), placements, "{stdout}");
    assert_eq!(rows("checksum"), placements, "{stdout}");
    assert!(stdout.contains("alloc + free of a cached"), "{stdout}");
    assert!(stdout.contains("copy_buffer_to_buffer"), "{stdout}");
    assert!(stdout.contains("seed 0x5"), "{stdout}");
    let mode = if caps.page_mapping.is_available() {
        "pages"
    } else {
        "segments"
    };
    assert!(
        stdout.contains(&format!(
            "pool      {mode} memory, conf policy:pytorch,expandable_segments:auto"
        )),
        "{stdout}"
    );
}

/// `--conf` sets the pool placements' configuration, and the JSON says which memory mode
/// they ran.
#[test]
fn cli_bench_conf_chooses_the_pool_placements_memory_mode() {
    let _ = common::gpu();
    let out = wgpool(&[
        "bench",
        "--quick",
        "--size-mb",
        "1",
        "--kernels",
        "copy_f32",
        "--conf",
        "expandable_segments:False",
        "--json",
    ]);
    assert_ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench --json");
    let pools = json["pools"].as_array().expect("pools");
    let host = common::gpu().capabilities().host_overflow.is_available();
    assert_eq!(pools.len(), 1 + usize::from(host), "{pools:?}");
    for pool in pools {
        assert_eq!(pool["memory_mode"], "segments", "{pool}");
        assert_eq!(pool["conf"], "expandable_segments:False", "{pool}");
        assert_eq!(
            pool["memory_mode_reason"], "expandable_segments:False",
            "{pool}"
        );
    }
    let rows = json["kernels"].as_array().expect("kernels");
    assert!(
        rows.iter()
            .any(|r| r["placement"] == "pool" && r["verified"] == true)
    );
    // Issue 21: the alloc section has a row per memory mode the device offers, each with
    // a cached block and a real trace's mix of sizes against the engine alone.
    let alloc = &json["alloc"];
    let modes: Vec<&str> = alloc["rows"]
        .as_array()
        .expect("alloc rows")
        .iter()
        .map(|row| row["mode"].as_str().expect("mode"))
        .collect();
    let expected = if common::gpu().capabilities().page_mapping.is_available() {
        vec!["pages", "segments"]
    } else {
        vec!["segments"]
    };
    assert_eq!(modes, expected, "{alloc}");
    for row in alloc["rows"].as_array().unwrap() {
        assert_eq!(row["trace"], "gpt2-train", "{row}");
        assert_eq!(row["ops"], 17479, "{row}");
        assert!(row["runs"].as_u64().unwrap() >= 2, "{row}");
        for key in [
            "cached_ns",
            "pool_ns_per_op",
            "engine_ns_per_op",
            "hot_pool_ns_per_op",
            "hot_engine_ns_per_op",
        ] {
            assert!(row[key].as_f64().unwrap() > 0.0, "{key}: {row}");
        }
        for prefix in ["", "hot_"] {
            let figure = |name: &str| row[format!("{prefix}{name}")].as_f64().unwrap();
            let ratio = figure("pool_ns_per_op") / figure("engine_ns_per_op");
            assert!(
                (figure("pool_over_engine") - ratio).abs() < 1e-9,
                "{prefix}: {row}"
            );
        }
    }
}
