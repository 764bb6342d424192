//! Stress: 8 threads x 20,000 random operations on one pool under a cap with host overflow,
//! with offload and prefetch, writes of any length, reads checked against a shadow copy,
//! bindings, foreign blocks and submission points. Every byte must survive, every error must
//! be one the API documents, the pool's consistency check must pass along the way, and
//! nothing may stay allocated at the end. Runs on lavapipe in CI (small sizes), on a
//! pool in pages mode: pages mapped, recycled and unmapped under the cap while threads write,
//! read and bind.

mod common;

use wgpool::config::Config;
use wgpool::engine::AllocError;
use wgpool::pool::{Block, MemoryMode, MoveError, Pool, ReadWriteError, Residency};
use wgpool::rng::SplitMix64;

const THREADS: u64 = 8;
const OPS_PER_THREAD: u64 = 20_000;
/// Live blocks per thread at most; the oldest are dropped beyond it.
const MAX_LIVE: usize = 48;

/// The stress's draws, from the crate's SplitMix64.
struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len.div_ceil(8) * 8];
        for chunk in out.chunks_exact_mut(8) {
            chunk.copy_from_slice(&self.next().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// A size: often one of a few (so the reuse cache serves it), else log-uniform up to 64 KiB,
/// and now and then up to 256 KiB.
fn size(rng: &mut Rng) -> u64 {
    const COMMON: [u64; 6] = [4, 100, 512, 1000, 4096, 65_536];
    match rng.below(10) {
        0..=5 => COMMON[rng.below(COMMON.len() as u64) as usize],
        6..=8 => {
            let bits = rng.below(17);
            1 + rng.below(1 << bits)
        }
        _ => 1 + rng.below(256 << 10),
    }
}

/// A live block and the bytes it must hold.
struct Live {
    block: Block,
    shadow: Vec<u8>,
}

#[derive(Default, Debug)]
struct Counts {
    allocs: u64,
    out_of_memory: u64,
    host_blocks: u64,
    writes: u64,
    reads: u64,
    offloads: u64,
    prefetches: u64,
    prefetch_refused: u64,
}

fn run_thread(pool: &Pool, other: &Pool, seed: u64) -> Counts {
    let mut rng = Rng(SplitMix64::new(seed));
    let mut live: Vec<Live> = Vec::new();
    let mut counts = Counts::default();
    for op in 0..OPS_PER_THREAD {
        let roll = rng.below(100);
        if live.is_empty() || roll < 30 {
            let size = size(&mut rng);
            match pool.alloc(size) {
                Ok(block) => {
                    counts.allocs += 1;
                    counts.host_blocks += u64::from(block.residency() == Residency::Host);
                    assert_eq!(block.size(), size);
                    assert!(block.capacity() >= size && block.capacity() % 512 == 0);
                    // A fresh block's bytes are unspecified until written: write them all.
                    let shadow = rng.bytes(size as usize);
                    pool.write(&block, &shadow).expect("write of a fresh block");
                    live.push(Live { block, shadow });
                }
                Err(AllocError::OutOfMemory(_)) => counts.out_of_memory += 1,
                Err(error) => panic!("op {op}: alloc({size}) failed unexpectedly: {error}"),
            }
            if live.len() > MAX_LIVE {
                live.drain(..MAX_LIVE / 2);
            }
            continue;
        }
        let index = rng.below(live.len() as u64) as usize;
        match roll {
            30..=49 => {
                live.swap_remove(index);
            }
            50..=64 => {
                // A write of any length up to the block's size, odd ones included.
                let entry = &mut live[index];
                let len = rng.below(entry.block.size() + 1) as usize;
                let data = rng.bytes(len);
                pool.write(&entry.block, &data).expect("write");
                entry.shadow[..len].copy_from_slice(&data);
                counts.writes += 1;
            }
            65..=67 => {
                let entry = &live[index];
                let got = pool.read(&entry.block).expect("read");
                assert!(got == entry.shadow, "op {op}: a block's bytes changed");
                counts.reads += 1;
            }
            68..=78 => {
                let entry = &mut live[index];
                pool.offload(&mut entry.block).expect("offload");
                assert_eq!(entry.block.residency(), Residency::Host);
                counts.offloads += 1;
            }
            79..=85 => {
                let entry = &mut live[index];
                let before = entry.block.residency();
                match pool.prefetch(&mut entry.block) {
                    Ok(()) => counts.prefetches += 1,
                    Err(MoveError::Alloc(AllocError::OutOfMemory(_))) => {
                        // The cap is full: the block stays where it was, with its bytes.
                        assert_eq!(entry.block.residency(), before);
                        counts.prefetch_refused += 1;
                    }
                    Err(error) => panic!("op {op}: prefetch failed unexpectedly: {error}"),
                }
            }
            86..=90 => {
                // Bindings stay inside the block, and a zero-length window is refused.
                let block = &live[index].block;
                let binding = block.binding().expect("a small block binds");
                assert_eq!(binding.offset, block.offset());
                assert_eq!(binding.size.map(|s| s.get()), Some(block.bound_size()));
                assert!(block.bound_size() <= block.capacity());
                assert!(block.binding_range(0, 0).is_err());
                assert!(block.binding_range(0, block.capacity() + 4).is_err());
            }
            91..=93 => {
                // Another pool refuses the block and changes nothing.
                let block = &live[index].block;
                assert!(matches!(
                    other.write(block, &[1, 2, 3]),
                    Err(ReadWriteError::ForeignBlock)
                ));
                assert!(matches!(
                    other.read(block),
                    Err(ReadWriteError::ForeignBlock)
                ));
            }
            94..=97 => pool.mark_submitted(),
            _ => {
                if op % 4 == 0 {
                    pool.check_consistency().expect("consistent in flight");
                }
                let stats = pool.memory_stats();
                assert!(stats.reserved_bytes.all.current <= 6 << 20, "the cap holds");
            }
        }
    }
    // Every surviving block still holds its bytes.
    for entry in &live {
        assert!(pool.read(&entry.block).expect("final read") == entry.shadow);
    }
    counts
}

#[test]
fn eight_threads_of_random_operations_keep_every_byte_and_the_pool_consistent() {
    let gpu = common::gpu();
    let config = Config::parse("memory_limit_mb:6,overflow:host,expandable_segments:True").unwrap();
    let pool = Pool::from_context(gpu, config).unwrap();
    assert_eq!(pool.memory_mode(), MemoryMode::Pages);
    let other = Pool::from_context(gpu, Config::default()).unwrap();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (pool, other) = (pool.clone(), other.clone());
            std::thread::spawn(move || run_thread(&pool, &other, 0x5EED_0000 + t))
        })
        .collect();
    let mut total = Counts::default();
    for worker in workers {
        let c = worker.join().expect("no thread panics");
        total.allocs += c.allocs;
        total.out_of_memory += c.out_of_memory;
        total.host_blocks += c.host_blocks;
        total.writes += c.writes;
        total.reads += c.reads;
        total.offloads += c.offloads;
        total.prefetches += c.prefetches;
        total.prefetch_refused += c.prefetch_refused;
    }
    println!("{total:?}");
    // Every kind of operation ran, the cap was reached, and overflow served some of it.
    assert!(total.allocs > 10_000 && total.reads > 1_000 && total.writes > 5_000);
    assert!(total.prefetch_refused > 0, "prefetch met a full cap");
    assert!(total.offloads > 1_000 && total.prefetches > 1_000);
    assert!(
        total.host_blocks > 0,
        "the cap was reached and overflow served requests"
    );
    // The workers ran their kernels (Kernels::run submits) and exited; blocks they exposed
    // after their last submission point are still held for their recordings. Every
    // command of every thread is submitted now.
    assert!(pool.held_bytes() > 0 || pool.memory_allocated() == 0);
    pool.mark_all_submitted();
    pool.check_consistency().unwrap();
    let device = pool.memory_stats();
    let host = pool.host_memory_stats().expect("host memory was used");
    assert_eq!(
        device.allocated_bytes.all.current, 0,
        "device memory all freed"
    );
    assert_eq!(host.allocated_bytes.all.current, 0, "host memory all freed");
    assert_eq!(pool.held_bytes(), 0);
    assert_eq!(
        device.num_ooms,
        total.out_of_memory + total.prefetch_refused,
        "only real failures count as out-of-memory"
    );
    assert!(device.reserved_bytes.all.peak <= 6 << 20);
    let memory = pool.device_memory_usage();
    assert!(memory.device_bytes_peak <= 6 << 20, "{memory:?}");
    // Binds in calls of the pool's own, or queued for calls that submissions sent.
    assert!(memory.bind_calls + memory.maps_queued + memory.unmaps_queued > 0);
    pool.empty_cache();
    assert_eq!(pool.memory_reserved(), 0);
    assert_eq!(pool.device_memory_usage().device_bytes, 0);
}
