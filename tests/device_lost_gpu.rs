//! A lost device on a real adapter (lavapipe in CI): once wgpu has lost the device, every
//! operation of a pool that knows the device's loss record fails with the loss, in both
//! memory modes, instead of returning as if it had run (wgpu 30 drops the work of a lost
//! device without an error). The device is lost on purpose with `Device::destroy`, which
//! every backend supports.
//!
//! These tests need an adapter and fail, saying how to install one, when there is none.

mod common;

use common::pattern_bytes;
use wgpool::config::Config;
use wgpool::engine::{AllocError, SourceErrorKind};
use wgpool::gpu::{DeviceLost, ErrorLog, GpuContext, HeadlessOptions};
use wgpool::pool::{
    BindingError, BlockBindings, MemoryMode, MoveError, Pool, PoolOptions, ReadWriteError,
    ResidencyError,
};
use wgpool::staging::{StagingError, StagingOptions, StagingPool};

const SIZE: u64 = 64 << 10;

/// The loss an allocation reports, or a panic naming what came instead.
fn lost_allocation(result: Result<wgpool::pool::Block, AllocError>) -> String {
    match result {
        Err(AllocError::Source(error)) if error.kind() == SourceErrorKind::DeviceLost => {
            AllocError::Source(error).to_string()
        }
        Err(other) => panic!("an allocation on a lost device failed otherwise: {other}"),
        Ok(block) => panic!(
            "an allocation on a lost device returned a block of {} bytes",
            block.size()
        ),
    }
}

#[test]
fn every_operation_of_a_pool_on_a_lost_device_fails_with_the_loss() {
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let pages = Pool::from_context(&own, Config::default()).unwrap();
    let segments =
        Pool::from_context(&own, Config::parse("expandable_segments:False").unwrap()).unwrap();
    assert_eq!(segments.memory_mode(), MemoryMode::Segments);
    let staging = StagingPool::from_pool(&pages, StagingOptions::default()).unwrap();
    let direct = StagingPool::from_context(&own, StagingOptions::default()).unwrap();
    let data = pattern_bytes(3, SIZE);
    let mut kept = Vec::new();
    for pool in [&pages, &segments] {
        assert!(pool.error_log().is_some(), "from_context gives the log");
        assert_eq!(pool.device_lost(), None);
        let block = pool.alloc(SIZE).unwrap();
        pool.write(&block, &data).unwrap();
        assert_eq!(pool.read(&block).unwrap(), data, "the device works before");
        // A freed block waits in the reuse cache: the next allocation of its size is a hit.
        drop(pool.alloc(SIZE).unwrap());
        kept.push(block);
    }
    staging.upload(&kept[0], &data).unwrap();

    own.device().destroy();
    // wgpu reports the loss of a destroyed device once its queue is empty, when polled.
    let _ = own.device().poll(wgpu::PollType::wait_indefinitely());
    assert_eq!(own.errors().device_lost().as_deref(), Some("Destroyed"));

    for (pool, block) in [&pages, &segments].into_iter().zip(&mut kept) {
        let mode = pool.memory_mode();
        let lost = pool.device_lost().expect("the pool sees the loss");
        assert_eq!(lost.reason(), "Destroyed");
        let message = lost.to_string();
        assert!(
            message.contains("the device was lost (Destroyed)")
                && message.contains("open a new device"),
            "{message}"
        );
        // The cached size, a new size and a labelled block all fail.
        for result in [
            pool.alloc(SIZE),
            pool.alloc(3 * SIZE),
            pool.alloc_labeled(SIZE, "after the loss"),
        ] {
            let message = lost_allocation(result);
            assert!(
                message.starts_with("the device was lost"),
                "{mode}: {message}"
            );
        }
        match pool.write(block, &data) {
            Err(ReadWriteError::DeviceLost(error)) => assert_eq!(error, lost),
            other => panic!("{mode}: a write on a lost device gave {other:?}"),
        }
        match pool.read(block) {
            Err(ReadWriteError::DeviceLost(error)) => assert_eq!(error, lost),
            Err(other) => panic!("{mode}: a read on a lost device failed otherwise: {other}"),
            Ok(bytes) => panic!(
                "{mode}: a read on a lost device returned {} bytes",
                bytes.len()
            ),
        }
        match pool.offload(block) {
            Err(MoveError::DeviceLost(error)) => assert_eq!(error, lost),
            Err(other) => panic!("{mode}: an offload on a lost device failed otherwise: {other}"),
            Ok(()) => panic!("{mode}: an offload on a lost device returned Ok"),
        }
        assert_eq!(
            pool.make_resident(&[block]),
            Err(ResidencyError::DeviceLost(lost.clone()))
        );
        let bindings = BlockBindings::new().read_write(0, block);
        // wgpu makes the layout without a word on a lost device; the pool's group refuses.
        let layout = bindings
            .create_layout(own.device(), wgpu::ShaderStages::COMPUTE)
            .unwrap();
        match bindings.create_bind_group(own.device(), &layout) {
            Err(BindingError::DeviceLost(error)) => assert_eq!(error, lost),
            Err(other) => panic!("{mode}: a bind group on a lost device failed otherwise: {other}"),
            Ok(_) => panic!("{mode}: a bind group on a lost device was made"),
        }
    }
    for staging in [&staging, &direct] {
        match staging.upload(&kept[0], &data) {
            Err(StagingError::DeviceLost(error)) => assert_eq!(error.reason(), "Destroyed"),
            Err(other) => panic!("an upload on a lost device failed otherwise: {other}"),
            Ok(()) => panic!("an upload on a lost device returned Ok"),
        }
        match staging.download(&kept[1]) {
            Err(StagingError::DeviceLost(error)) => assert_eq!(error.reason(), "Destroyed"),
            Err(other) => panic!("a download on a lost device failed otherwise: {other}"),
            Ok(bytes) => panic!("a download on a lost device returned {} bytes", bytes.len()),
        }
    }
}

/// An application with its own device-lost callback hands the pool a log and records the
/// loss itself; the pool then fails as it does with a context's log. A pool without a log
/// cannot tell, and says so: `device_lost` stays `None`.
#[test]
fn a_loss_the_application_records_stops_the_pools_given_its_log() {
    let gpu = common::gpu();
    let log = ErrorLog::default();
    let told = Pool::with_options(
        gpu.device(),
        gpu.queue(),
        Config::default(),
        PoolOptions::default().with_error_log(log.clone()),
    )
    .unwrap();
    let untold = Pool::new(gpu.device(), gpu.queue(), Config::default()).unwrap();
    assert!(untold.error_log().is_none());
    let block = told.alloc(SIZE).unwrap();
    assert!(!log.is_device_lost());
    assert_eq!(log.check_device(), Ok(()));

    // The shared device stays usable: only the log says it was lost.
    log.record_device_lost(wgpu::DeviceLostReason::Unknown, "the application saw it go");
    assert!(log.is_device_lost());
    let expected = DeviceLost::new("Unknown: the application saw it go");
    assert_eq!(log.check_device(), Err(expected.clone()));
    assert_eq!(told.device_lost(), Some(expected.clone()));
    lost_allocation(told.alloc(SIZE));
    match told.write(&block, &[1, 2, 3, 4]) {
        Err(ReadWriteError::DeviceLost(error)) => assert_eq!(error, expected),
        other => panic!("a write after the recorded loss gave {other:?}"),
    }
    assert_eq!(untold.device_lost(), None);
    let other = untold.alloc(SIZE).unwrap();
    untold.write(&other, &[1, 2, 3, 4]).unwrap();
}

/// `replay --gpu` on a lost device stops with the loss instead of reporting figures of work
/// that did not run (the CLI then exits 1).
#[test]
fn a_replay_on_a_lost_device_reports_no_figures() {
    use wgpool::trace::{GpuReplayError, GpuReplayOptions, parse_trace, replay_on_gpu};
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let trace =
        parse_trace("alloc,1,4096,0\nalloc,2,70000,0\nfree,1,4096,0\nfree,2,70000,0\n").unwrap();
    let options = GpuReplayOptions::default();
    let report = replay_on_gpu(&trace, &Config::default(), &own, &options).unwrap();
    assert_eq!(report.num_ooms, 0, "the trace replays on a working device");
    own.device().destroy();
    let _ = own.device().poll(wgpu::PollType::wait_indefinitely());
    match replay_on_gpu(&trace, &Config::default(), &own, &options) {
        Err(GpuReplayError::Alloc { source, .. }) => {
            let message = source.to_string();
            assert!(
                message.contains("the device was lost (Destroyed)"),
                "{message}"
            );
        }
        Err(other) => panic!("the replay failed otherwise: {other}"),
        Ok(report) => panic!(
            "a replay on a lost device reported {} ops in {} s",
            report.ops, report.wall_time_s
        ),
    }
}

/// The benchmark on a lost device returns an error rather than figures of work that did not
/// run (`wgpool bench` then says the device was lost and exits 1).
#[test]
fn a_benchmark_on_a_lost_device_reports_no_figures() {
    use wgpool::bench::timing::RunCounts;
    use wgpool::bench::{BenchConfig, BenchError, default_placements, run_bench};
    use wgpool::kernels::KernelOptions;
    let own = common::own(|| GpuContext::headless(&HeadlessOptions::default()).unwrap());
    let config = BenchConfig {
        size_bytes: 64 * 1024,
        counts: RunCounts::new(1, 3),
        force_wall: false,
        seed: 5,
        kernels: None,
        kernel_options: KernelOptions::default(),
    };
    let mut placements = default_placements(&own).unwrap();
    own.device().destroy();
    let _ = own.device().poll(wgpu::PollType::wait_indefinitely());
    match run_bench(&own, &config, &mut placements, &mut |_| {}) {
        Err(BenchError::DeviceLost { source, .. }) => assert_eq!(source.reason(), "Destroyed"),
        Err(other) => panic!("a benchmark on a lost device failed otherwise: {other}"),
        Ok(report) => panic!(
            "a benchmark on a lost device reported {} kernel rows",
            report.kernels.len()
        ),
    }
}
