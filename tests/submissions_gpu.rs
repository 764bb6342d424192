//! When dropped blocks are freed, under every documented use (issue 24): threads that each
//! record and submit, cached bind groups, recordings handed to another thread, submission
//! points that cover every pool of a device, and the held limit.
//!
//! Tests that close every recording of a device (`mark_all_submitted`) or count what a
//! device holds run on a device of their own: the binary's shared device serves tests on
//! many threads at once.

mod common;
#[path = "common/mlp.rs"]
mod mlp;

use std::sync::Arc;

use mlp::{BATCH, Mlp, WIDTHS, max_abs_error, values};
use wgpool::config::Config;
use wgpool::engine::AllocError;
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::pool::{HeldLimitAction, MemoryMode, Pool, PoolOptions};

fn pool(gpu: &GpuContext, conf: &str) -> Pool {
    Pool::from_context(gpu, Config::parse(conf).expect("conf")).expect("pool")
}

/// Forward passes of `iterations` inputs on one thread, each recorded into its own encoder
/// and submitted through the pool; returns the outputs that differ from the CPU's.
fn forward_passes(activations: &Pool, model: &Mlp, seed: u64, iterations: usize) -> usize {
    let device = activations.device().clone();
    let mut wrong = 0;
    for iteration in 0..iterations {
        let input = values(seed + iteration as u64, BATCH * WIDTHS[0]);
        let mut encoder = device.create_command_encoder(&Default::default());
        let output = model.record_forward(activations, &mut encoder, &input);
        activations.submit([encoder.finish()]);
        let got: Vec<f32> =
            bytemuck::pod_collect_to_vec(&activations.read(&output).expect("read output"));
        if max_abs_error(&got, &model.cpu_forward(&input)) > 1e-5 {
            wrong += 1;
        }
    }
    wrong
}

/// Two threads share the activation pool; each records and submits its own encoders
/// (issue 24, case 1). Another thread's submission point must not free blocks this thread
/// dropped after recording them.
fn two_threads_each_submitting_their_own(conf: &str, mode: MemoryMode, iterations: usize) {
    let gpu = common::gpu();
    let activations = pool(gpu, conf);
    assert_eq!(activations.memory_mode(), mode);
    let workers: Vec<_> = (0..2u64)
        .map(|thread| {
            let activations = activations.clone();
            let weights = pool(gpu, "");
            std::thread::spawn(move || {
                let model = Mlp::new(&weights, 100 + thread);
                let wrong = forward_passes(&activations, &model, thread << 32, iterations);
                weights.mark_submitted();
                wrong
            })
        })
        .collect();
    let wrong: Vec<usize> = workers
        .into_iter()
        .map(|worker| worker.join().expect("worker"))
        .collect();
    assert_eq!(
        wrong,
        [0, 0],
        "wrong outputs per thread over {iterations} passes"
    );
    activations.check_consistency().expect("consistent");
    assert_eq!(activations.held_bytes(), 0, "every thread submitted");
}

#[test]
fn two_threads_each_submitting_their_own_encoders_compute_exactly_on_fixed_segments() {
    two_threads_each_submitting_their_own(
        "expandable_segments:False",
        MemoryMode::Segments,
        10_000,
    );
}

#[test]
fn two_threads_each_submitting_their_own_encoders_compute_exactly_on_pages() {
    two_threads_each_submitting_their_own("expandable_segments:True", MemoryMode::Pages, 10_000);
}

/// A bind group built once and recorded again after its blocks are dropped (issue 24,
/// case 2): the memory it binds serves no other block while it lives.
fn a_cached_bind_group_keeps_its_memory(conf: &str) {
    let gpu = common::gpu();
    let device = gpu.device();
    let activations = pool(gpu, conf);
    let weights = pool(gpu, "");
    let model = Mlp::new(&weights, 7);
    let input = values(1, BATCH * WIDTHS[0]);
    let x = activations.alloc((input.len() * 4) as u64).unwrap();
    activations.write(&x, bytemuck::cast_slice(&input)).unwrap();
    let y = activations.alloc((BATCH * WIDTHS[1] * 4) as u64).unwrap();
    let cached = model.bind(0, &x, &y);
    let mut encoder = device.create_command_encoder(&Default::default());
    model.record(&mut encoder, 0, &cached);
    activations.submit([encoder.finish()]);
    let first: Vec<f32> = bytemuck::pod_collect_to_vec(&activations.read(&y).unwrap());

    // The application drops its input; the next blocks of its size get other data.
    let x_size = x.size();
    drop(x);
    assert_eq!(activations.referenced_bytes(), x_size.div_ceil(512) * 512);
    let others: Vec<_> = (0..4)
        .map(|i| {
            let other = activations.alloc(x_size).unwrap();
            activations
                .write(&other, &vec![0x40 + i; x_size as usize])
                .unwrap();
            other
        })
        .collect();
    // Recorded again, the cached group still reads the input's bytes.
    let mut encoder = device.create_command_encoder(&Default::default());
    model.record(&mut encoder, 0, &cached);
    activations.submit([encoder.finish()]);
    let again: Vec<f32> = bytemuck::pod_collect_to_vec(&activations.read(&y).unwrap());
    assert_eq!(
        again, first,
        "the cached group read the input it was built with"
    );
    let expected: Vec<f32> = {
        let w = &model.host[0];
        let (inputs, outputs) = (WIDTHS[0], WIDTHS[1]);
        (0..BATCH * outputs)
            .map(|i| {
                let (row, col) = (i / outputs, i % outputs);
                let acc: f32 = (0..inputs)
                    .map(|k| input[row * inputs + k] * w[k * outputs + col])
                    .sum();
                acc.max(0.0)
            })
            .collect()
    };
    assert!(max_abs_error(&again, &expected) <= 1e-5, "{again:?}");
    for (i, other) in others.iter().enumerate() {
        assert_eq!(
            activations.read(other).unwrap(),
            vec![0x40 + i as u8; x_size as usize],
            "the other blocks kept their own bytes"
        );
    }
    // Once the group is gone, the input's memory returns.
    drop(cached);
    assert_eq!(activations.referenced_bytes(), 0);
    activations.mark_submitted();
    weights.mark_submitted();
    activations.check_consistency().unwrap();
}

#[test]
fn a_cached_bind_group_recorded_after_its_block_is_dropped_reads_the_blocks_bytes_on_fixed_segments()
 {
    a_cached_bind_group_keeps_its_memory("expandable_segments:False");
}

#[test]
fn a_cached_bind_group_recorded_after_its_block_is_dropped_reads_the_blocks_bytes_on_pages() {
    a_cached_bind_group_keeps_its_memory("expandable_segments:True");
}

/// A prepared kernel is a cached bind group too.
#[test]
fn a_prepared_kernel_keeps_its_blocks_memory() {
    use wgpool::kernels::{KernelCall, Kernels};
    let gpu = common::gpu();
    let pool = pool(gpu, "");
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let a = pool.alloc(4096).unwrap();
    let fill = kernels.prepare(&KernelCall::fill(a.operand(), 7)).unwrap();
    let place = (a.buffer().clone(), a.offset());
    drop(a);
    pool.mark_submitted();
    let b = pool.alloc(4096).unwrap();
    assert_ne!((b.buffer().clone(), b.offset()), place);
    pool.write(&b, &[9; 4096]).unwrap();
    kernels.submit(&fill).unwrap();
    assert_eq!(
        pool.read(&b).unwrap(),
        vec![9; 4096],
        "the kernel wrote A's memory"
    );
    drop(fill);
    pool.mark_submitted();
    drop(b);
    assert_eq!(pool.referenced_bytes(), 0);
    pool.check_consistency().unwrap();
}

/// One thread records, another submits: the recording is handed over with the command
/// buffer, and the blocks it exposed wait for the token.
#[test]
fn a_recording_handed_to_the_submitting_thread_holds_its_blocks_until_dropped() {
    let gpu = common::gpu();
    let activations = pool(gpu, "");
    let weights = pool(gpu, "");
    let model = Arc::new(Mlp::new(&weights, 3));
    let input = values(5, BATCH * WIDTHS[0]);
    let (commands, recording, output) = {
        let (activations, model, input) = (activations.clone(), model.clone(), input.clone());
        std::thread::spawn(move || {
            let device = activations.device().clone();
            let mut encoder = device.create_command_encoder(&Default::default());
            let output = model.record_forward(&activations, &mut encoder, &input);
            (encoder.finish(), activations.take_recording(), output)
        })
        .join()
        .expect("recording thread")
    };
    assert!(!recording.is_empty());
    let held = activations.held_bytes();
    assert!(held > 0, "the recorded layers' inputs are held");
    // This thread's own submission point does not cover the worker's recording.
    activations.mark_submitted();
    assert_eq!(activations.held_bytes(), held);
    // Blocks allocated and written now never take the held memory.
    let filler: Vec<_> = (0..8)
        .map(|_| {
            let block = activations.alloc((BATCH * WIDTHS[1] * 4) as u64).unwrap();
            activations
                .write(&block, &vec![0xFF; block.size() as usize])
                .unwrap();
            block
        })
        .collect();
    activations.queue().submit([commands]);
    drop(recording);
    assert_eq!(activations.held_bytes(), 0, "dropping the token freed them");
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&activations.read(&output).unwrap());
    assert!(max_abs_error(&got, &model.cpu_forward(&input)) <= 1e-5);
    drop(filler);
    weights.mark_submitted();
}

/// A submission point reached through one pool, or through the device, covers every pool
/// on the device; `mark_all_submitted` covers every thread.
#[test]
fn submission_points_cover_every_pool_of_the_device() {
    let gpu = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let (first, second) = (pool(&gpu, ""), pool(&gpu, ""));
    let expose_and_drop = |pool: &Pool| {
        let block = pool.alloc(4096).unwrap();
        let _ = block.binding().unwrap();
        drop(block);
    };
    expose_and_drop(&first);
    expose_and_drop(&second);
    assert_eq!((first.held_bytes(), second.held_bytes()), (4096, 4096));
    assert!(
        second
            .memory_summary()
            .contains("1 dropped block (4.00 KiB) wait")
    );
    first.mark_submitted();
    assert_eq!((first.held_bytes(), second.held_bytes()), (0, 0));

    expose_and_drop(&first);
    expose_and_drop(&second);
    wgpool::pool::mark_submitted(gpu.device());
    assert_eq!((first.held_bytes(), second.held_bytes()), (0, 0));

    // Another thread's exposures wait for that thread, or for mark_all_submitted.
    let worker = {
        let second = second.clone();
        std::thread::spawn(move || {
            let block = second.alloc(8192).unwrap();
            let _ = block.binding().unwrap();
        })
    };
    worker.join().expect("worker");
    assert_eq!(second.held_bytes(), 8192);
    second.mark_submitted();
    assert_eq!(
        second.held_bytes(),
        8192,
        "the worker never reached a submission point"
    );
    first.mark_all_submitted();
    assert_eq!(second.held_bytes(), 0);
    // A block never exposed returns at once.
    drop(first.alloc(4096).unwrap());
    assert_eq!(first.held_bytes(), 0);
}

/// The device's count of held blocks (what lets submission points skip its pools) follows
/// every block held and released, and lets go of the blocks of a pool dropped before its
/// recordings were submitted.
#[test]
fn the_devices_count_of_held_blocks_forgets_a_dropped_pools_blocks() {
    let gpu = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let device = gpu.device().clone();
    let (kept, dropped) = (pool(&gpu, ""), pool(&gpu, ""));
    for (pool, blocks) in [(&kept, 1), (&dropped, 2)] {
        for _ in 0..blocks {
            let block = pool.alloc(4096).unwrap();
            let _ = block.binding().unwrap();
            drop(block);
        }
    }
    assert_eq!(wgpool::pool::held_blocks_on(&device), 3);
    drop(dropped);
    assert_eq!(
        wgpool::pool::held_blocks_on(&device),
        1,
        "the dropped pool's two blocks are gone with it"
    );
    kept.mark_submitted();
    assert_eq!(kept.held_bytes(), 0);
    assert_eq!(wgpool::pool::held_blocks_on(&device), 0);
}

/// Held memory is bounded: past the held limit the pool warns once, naming the missing
/// submit, or refuses allocations.
#[test]
fn held_bytes_past_the_limit_warn_or_refuse_naming_the_missing_submit() {
    let gpu = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let log = common::captured_log();
    let options = PoolOptions::default()
        .with_label("leaky")
        .with_held_limit(64 << 10, HeldLimitAction::Warn);
    let warned =
        Pool::with_options(gpu.device(), gpu.queue(), Config::default(), options).expect("pool");
    for _ in 0..32 {
        let block = warned.alloc(4096).unwrap();
        let _ = block.operand();
    }
    assert_eq!(warned.held_bytes(), 32 * 4096);
    let lines = log.lines_of("leaky");
    assert_eq!(lines.len(), 1, "one warning: {lines:?}");
    for needle in [
        "over the held limit of 64.00 KiB",
        "Pool::submit",
        "take_recording",
    ] {
        assert!(lines[0].contains(needle), "{needle}: {}", lines[0]);
    }
    warned.mark_submitted();
    assert_eq!(warned.held_bytes(), 0);

    let options = PoolOptions::default().with_held_limit(16 << 10, HeldLimitAction::Error);
    let strict = Pool::with_options(gpu.device(), gpu.queue(), Config::default(), options).unwrap();
    for _ in 0..5 {
        let block = strict.alloc(4096).unwrap();
        let _ = block.slice();
    }
    let error = strict.alloc(4096).unwrap_err();
    assert_eq!(
        error,
        AllocError::HeldForSubmission {
            held: 5 * 4096,
            limit: 16 << 10
        }
    );
    for needle in ["Pool::submit", "mark_submitted", "held limit of 16.00 KiB"] {
        assert!(error.to_string().contains(needle), "{error}");
    }
    strict.mark_submitted();
    let block = strict
        .alloc(4096)
        .expect("served again after the submission point");
    drop(block);
}

/// A block bound on one thread and dropped by another waits for the thread that bound it.
#[test]
fn a_block_bound_on_one_thread_and_dropped_on_another_waits_for_the_binder() {
    let gpu = common::gpu();
    let pool = pool(gpu, "");
    let block = pool.alloc(4096).unwrap();
    let _ = block.binding().expect("binding");
    std::thread::spawn(move || drop(block))
        .join()
        .expect("dropping thread");
    assert_eq!(pool.held_bytes(), 4096, "held for this thread's recording");
    let other = pool.alloc(4096).unwrap();
    assert_eq!(pool.held_bytes(), 4096);
    pool.mark_submitted();
    assert_eq!(pool.held_bytes(), 0);
    drop(other);
}
