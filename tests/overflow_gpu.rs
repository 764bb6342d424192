//! Host memory behind the pool: `overflow:host`, `offload` and `prefetch`, on a real adapter
//! (lavapipe in CI), with and without `MAPPABLE_PRIMARY_BUFFERS`.
//!
//! These tests need an adapter and fail, saying how to install one, when there is none.

mod common;

use common::pattern_bytes as pattern;
use wgpool::config::Config;
use wgpool::engine::AllocError;
use wgpool::gpu::GpuContext;
use wgpool::kernels::{Dtype, KernelCall, Kernels};
use wgpool::pool::{BindingError, Block, MoveError, Pool, PoolError, ReadWriteError, Residency};

/// A device opened without `MAPPABLE_PRIMARY_BUFFERS`, as on adapters that lack it.
fn device_without_mappable_primary(gpu: &GpuContext) -> (wgpu::Device, wgpu::Queue) {
    let descriptor = wgpu::DeviceDescriptor {
        label: Some("no mappable primary buffers"),
        required_features: wgpu::Features::empty(),
        required_limits: gpu.adapter().limits(),
        ..Default::default()
    };
    pollster::block_on(gpu.adapter().request_device(&descriptor)).expect("a second device")
}

#[test]
fn allocations_over_a_full_cap_overflow_to_host_and_kernels_still_work() {
    let gpu = common::gpu();
    assert!(
        gpu.features()
            .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS),
        "lavapipe and NVIDIA have MAPPABLE_PRIMARY_BUFFERS; this test expects it"
    );
    let pool = Pool::from_context(
        gpu,
        Config::parse("memory_limit_mb:40,overflow:host").unwrap(),
    )
    .unwrap();
    let kernels = Kernels::new(gpu.device(), gpu.queue());
    let n = 4 << 20; // 16 MiB of f32 per block
    let b = pool.alloc(4 * n).unwrap();
    let c = pool.alloc(4 * n).unwrap();
    assert_eq!(
        (b.residency(), c.residency()),
        (Residency::Device, Residency::Device)
    );
    // The cap is full: this one comes from host memory instead of failing.
    let a = pool.alloc(4 * n).unwrap();
    assert_eq!(a.residency(), Residency::Host);
    assert_eq!(
        (pool.memory_stats().num_ooms, pool.num_host_overflows()),
        (0, 1),
        "a request served from host memory is an overflow, not an out-of-memory"
    );
    assert!(
        pool.memory_summary()
            .contains("1 request was served from host memory")
    );
    let device = pool.memory_stats();
    let host = pool.host_memory_stats().expect("host memory in use");
    assert_eq!(
        device.allocated_bytes.all.current,
        8 * n,
        "device statistics count device blocks only"
    );
    assert_eq!(
        host.allocated_bytes.all.current,
        4 * n,
        "host-resident bytes are counted apart"
    );
    assert!(device.reserved_bytes.all.current <= 40 << 20);
    let bs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let cs: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.25).collect();
    pool.write(&b, bytemuck::cast_slice(&bs)).unwrap();
    pool.write(&c, bytemuck::cast_slice(&cs)).unwrap();
    // A kernel writes the host-resident block, reading two device blocks.
    kernels
        .run(&KernelCall::triad(
            Dtype::F32,
            b.operand(),
            c.operand(),
            2.0,
            a.operand(),
        ))
        .unwrap();
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&pool.read(&a).unwrap());
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, &x)| x == bs[i] + 2.0 * cs[i]),
        "triad into a host block"
    );
    // And one reads it: copy the host block into a device block. The triad was submitted
    // by `Kernels::run`; marking that lets the dropped `b` free its memory at once.
    pool.mark_submitted();
    drop(b);
    let d = pool.alloc(4 * n).unwrap();
    assert_eq!(d.residency(), Residency::Device);
    kernels
        .run(&KernelCall::copy(Dtype::F32, a.operand(), d.operand()))
        .unwrap();
    assert_eq!(pool.read(&d).unwrap(), pool.read(&a).unwrap());
    assert!(pool.memory_summary().contains("host-resident memory"));
    pool.check_consistency().unwrap();
}

#[test]
fn a_hundred_offload_prefetch_cycles_keep_every_byte() {
    let gpu = common::gpu();
    let pool = Pool::from_context(gpu, Config::default()).unwrap();
    let sizes = [
        512u64,
        1000,
        4096,
        65_536,
        100_003,
        1 << 20,
        3 << 20,
        12 << 20,
    ];
    let mut blocks: Vec<(Block, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let block = pool.alloc(size).unwrap();
            let data = pattern(i as u32 + 7, size);
            pool.write(&block, &data).unwrap();
            (block, data)
        })
        .collect();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut moves = [0u32; 2];
    for cycle in 0..100 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let index = (state % blocks.len() as u64) as usize;
        let (block, data) = &mut blocks[index];
        let generation = block.generation();
        let before = block.residency();
        match before {
            Residency::Device => pool.offload(block).unwrap(),
            Residency::Host => pool.prefetch(block).unwrap(),
        }
        assert_ne!(block.residency(), before, "cycle {cycle}: the block moved");
        assert_eq!(block.generation(), generation + 1);
        moves[(before == Residency::Host) as usize] += 1;
        assert_eq!(
            pool.read(block).unwrap(),
            *data,
            "cycle {cycle}: block {index} changed"
        );
        if cycle % 10 == 0 {
            // Blocks change between moves too: the next move must carry the new bytes.
            *data = pattern(cycle + 1000, block.size());
            pool.write(block, data).unwrap();
        }
    }
    assert!(
        moves[0] > 20 && moves[1] > 20,
        "both directions exercised: {moves:?}"
    );
    for (block, data) in &blocks {
        assert_eq!(pool.read(block).unwrap(), *data);
    }
    pool.check_consistency().unwrap();
    let host_blocks = blocks
        .iter()
        .filter(|(b, _)| b.residency() == Residency::Host)
        .count() as u64;
    assert_eq!(
        pool.host_memory_stats().unwrap().allocation.all.current,
        host_blocks
    );
    drop(blocks);
    pool.empty_cache();
    assert_eq!(pool.memory_stats().reserved_bytes.all.current, 0);
    assert_eq!(
        pool.host_memory_stats().unwrap().reserved_bytes.all.current,
        0
    );
}

#[test]
fn offload_frees_device_memory_and_prefetch_reports_a_full_device() {
    let gpu = common::gpu();
    let pool = Pool::from_context(gpu, Config::parse("memory_limit_mb:24").unwrap()).unwrap();
    let mut first = pool.alloc(16 << 20).unwrap();
    pool.write(&first, &pattern(1, 16 << 20)).unwrap();
    assert!(
        matches!(pool.alloc(16 << 20), Err(AllocError::OutOfMemory(_))),
        "the cap is full"
    );
    pool.offload(&mut first).unwrap();
    assert_eq!(pool.memory_stats().allocated_bytes.all.current, 0);
    let second = pool
        .alloc(16 << 20)
        .expect("offloading made room on the device");
    let error = pool.prefetch(&mut first).unwrap_err();
    let MoveError::Alloc(AllocError::OutOfMemory(oom)) = &error else {
        panic!("expected out-of-memory, got {error}")
    };
    assert_eq!(oom.host_overflow, Some(16 << 20));
    assert!(
        error.to_string().contains("16.00 MiB went to host memory"),
        "{error}"
    );
    assert_eq!(
        first.residency(),
        Residency::Host,
        "a failed prefetch leaves the block where it was"
    );
    assert_eq!(pool.read(&first).unwrap(), pattern(1, 16 << 20));
    drop(second);
    pool.prefetch(&mut first).unwrap();
    assert_eq!(first.residency(), Residency::Device);
    assert_eq!(pool.read(&first).unwrap(), pattern(1, 16 << 20));
    let other = Pool::from_context(gpu, Config::default()).unwrap();
    assert!(
        matches!(other.offload(&mut first), Err(MoveError::ForeignBlock)),
        "blocks move only within their pool"
    );
}

#[test]
fn without_mappable_primary_buffers_offloaded_blocks_must_be_prefetched_before_binding() {
    let gpu = common::gpu();
    let second = common::own(|| device_without_mappable_primary(gpu));
    let (device, queue) = &*second;
    let pool = Pool::new(device, queue, Config::default()).unwrap();
    let mut block = pool.alloc(300_000).unwrap();
    let data = pattern(42, 300_000);
    pool.write(&block, &data).unwrap();
    assert!(block.binding().is_ok());
    pool.offload(&mut block).unwrap();
    assert_eq!(block.residency(), Residency::Host);
    let error = block.binding().unwrap_err();
    assert_eq!(error, BindingError::Offloaded);
    let message = error.to_string();
    for needle in [
        "moved to host memory by Pool::offload",
        "this device was created without MAPPABLE_PRIMARY_BUFFERS",
        "Pool::prefetch",
    ] {
        assert!(
            message.contains(needle),
            "message lacks `{needle}`: {message}"
        );
    }
    assert_eq!(
        pool.read(&block).unwrap(),
        data,
        "staging memory keeps the bytes"
    );
    pool.prefetch(&mut block).unwrap();
    assert!(block.binding().is_ok());
    assert_eq!(pool.read(&block).unwrap(), data);
    assert_eq!(block.generation(), 2);
    pool.check_consistency().unwrap();
}

#[test]
fn overflow_to_host_needs_a_device_that_binds_host_memory() {
    let gpu = common::gpu();
    let second = common::own(|| device_without_mappable_primary(gpu));
    let (device, queue) = &*second;
    let refused = Pool::new(device, queue, Config::parse("overflow:host").unwrap()).unwrap_err();
    assert_eq!(refused, PoolError::HostOverflowUnsupported);
    let message = refused.to_string();
    for needle in [
        "MAPPABLE_PRIMARY_BUFFERS",
        "this device was created without it",
        "required_features",
    ] {
        assert!(
            message.contains(needle),
            "message lacks `{needle}`: {message}"
        );
    }
    // Offloading stays available there: blocks wait in host memory until prefetched.
    assert!(Pool::new(device, queue, Config::default()).is_ok());
}

#[test]
fn blocks_of_another_devices_pool_are_refused_without_a_panic() {
    let gpu = common::gpu();
    let second = common::own(|| device_without_mappable_primary(gpu));
    let (device, queue) = &*second;
    let here = Pool::from_context(gpu, Config::default()).unwrap();
    let there = Pool::new(device, queue, Config::default()).unwrap();
    let mut foreign = there.alloc(4096).unwrap();
    there.write(&foreign, &pattern(3, 4096)).unwrap();
    assert!(matches!(
        here.write(&foreign, &[1, 2, 3, 4]),
        Err(ReadWriteError::ForeignBlock)
    ));
    assert!(matches!(
        here.read(&foreign),
        Err(ReadWriteError::ForeignBlock)
    ));
    assert!(matches!(
        here.offload(&mut foreign),
        Err(MoveError::ForeignBlock)
    ));
    assert!(matches!(
        here.prefetch(&mut foreign),
        Err(MoveError::ForeignBlock)
    ));
    let message = here.read(&foreign).unwrap_err().to_string();
    assert!(message.contains("belongs to another pool"), "{message}");
    // Nothing changed, in either pool.
    assert_eq!(there.read(&foreign).unwrap(), pattern(3, 4096));
    assert!(!here.owns(&foreign) && there.owns(&foreign));
    here.check_consistency().unwrap();
    there.check_consistency().unwrap();
}

#[test]
fn short_writes_keep_the_bytes_after_them_in_device_and_host_memory() {
    let gpu = common::gpu();
    let pool = Pool::from_context(gpu, Config::default()).unwrap();
    let mut block = pool.alloc(16).unwrap();
    let original: Vec<u8> = (1..=16).collect();
    for round in 0..2 {
        pool.write(&block, &original).unwrap();
        pool.write(&block, &[170; 5]).unwrap();
        let mut expected = original.clone();
        expected[..5].fill(170);
        assert_eq!(
            pool.read(&block).unwrap(),
            expected,
            "round {round} ({:?})",
            block.residency()
        );
        // Odd lengths in the middle of a word and at a word's end.
        pool.write(&block, &[7; 7]).unwrap();
        expected[..7].fill(7);
        assert_eq!(pool.read(&block).unwrap(), expected);
        pool.write(&block, &[]).unwrap();
        assert_eq!(pool.read(&block).unwrap(), expected);
        // The next round runs on the block offloaded to host memory.
        pool.offload(&mut block).unwrap();
    }
    // A block of odd size written whole: its own bytes, nothing else.
    let odd = pool.alloc(13).unwrap();
    pool.write(&odd, &[9; 13]).unwrap();
    assert_eq!(pool.read(&odd).unwrap(), vec![9; 13]);
}

#[test]
fn short_writes_on_staging_host_memory_keep_the_bytes_after_them() {
    let gpu = common::gpu();
    let second = common::own(|| device_without_mappable_primary(gpu));
    let (device, queue) = &*second;
    let pool = Pool::new(device, queue, Config::default()).unwrap();
    let mut block = pool.alloc(16).unwrap();
    let original: Vec<u8> = (1..=16).collect();
    pool.write(&block, &original).unwrap();
    pool.offload(&mut block).unwrap();
    pool.write(&block, &[170; 5]).unwrap();
    let mut expected = original;
    expected[..5].fill(170);
    assert_eq!(pool.read(&block).unwrap(), expected);
}
