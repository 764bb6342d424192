//! What page mapping costs on this adapter, against plain buffers, as one JSON object:
//!
//! - `grow`: growing by `--grow-mib` MiB as pages-mode memory (allocate the chunk and bind
//!   it, in one call and in 20 MiB steps) against `create_buffer` of the same size;
//! - `dispatches`: `--dispatches` small independent kernels (a fill of `--block-kib` KiB
//!   each), in one compute pass, on blocks of one address range, on blocks of one plain
//!   buffer, on blocks in separate buffers (separate segments), on blocks of one range
//!   reached through a wrapper each (aliases, which wgpu tracks apart) and through 16
//!   wrappers taken in turn, and on blocks of a pool in each mode (`expandable_segments:True`,
//!   whose blocks reach their range through the pool's wrappers, and `False`);
//! - `alloc_sweep` (`--alloc-sweep`): `vkAllocateMemory` of chunks of several sizes, up to 64
//!   calls each, timed call by call, so that the cost per call and per MiB can be told apart;
//!   then, for each size, as many `create_buffer` calls of that size (all kept alive, as
//!   fixed segments are), so that the two ways of getting memory compare at the same fill;
//!   and for 64 and 256 MiB, chunks mapped with a wait for each bind before the next
//!   allocation, and plain `vkAllocateMemory` with no bind at all of every device-local
//!   memory type, to tell the cost of the memory from the cost of binding it;
//! - `replays` (`--replay TRACE`): `replay --gpu` of a trace under each `--chunk-policy`,
//!   `--rounds` times in turn, with driver time and device memory per run;
//! - `alloc_threads` (`--alloc-threads 1,2,4,8`): the same plain `vkAllocateMemory` calls
//!   spread over each number of threads, timed from the first to the last: whether the
//!   driver allocates in parallel (NVIDIA 580: no);
//! - `--fill-ranges K` (prints to stderr and exits): reserves K sparse ranges and maps a page
//!   in the last `--fill-maps` of them, or with `--fill-interleave` a page in each right
//!   after it is reserved, in a `PagedMemory` each: where the driver's sparse address space
//!   really ends (run one process per K: a driver that crashes ends it).
//!
//! wgpu tracks usage per buffer: a kernel writing a block is a read-write use of the whole
//! buffer, so consecutive dispatches on blocks of one buffer get a barrier between them,
//! while dispatches on separate buffers do not.
//!
//! `cargo run --release --example page_costs -- --grow-mib 1024 --dispatches 1000`
//!
//! A chunk policy is `segments` (the trace under `expandable_segments:False`) or
//! `MIN_MIB,MAX_MIB,DIVISOR,GRANULE_KIB,SPARE_ON_LARGE,DEVICE_DIVISOR,BIND_SPARE`
//! ([`ChunkPolicy`]; flags are 0 or 1), for example `2,256,128,2048,1,2048,1` (the default)
//! or `2,256,128,64,0,0,0` (the policy before 2026-12-03's second session).

use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;
use wgpool::bench::timing::{RunCounts, Timer, median};
use wgpool::config::Config;
use wgpool::gpu::scope::catch;
use wgpool::gpu::sparse::{ChunkPolicy, PagedMemory};
use wgpool::gpu::{GpuContext, HeadlessOptions};
use wgpool::kernels::{KernelCall, KernelError, Kernels, Operand, PreparedKernel};
use wgpool::pool::{Block, MemoryMode, Pool};
use wgpool::trace::{GpuReplayOptions, ReadOptions, read_trace, replay_on_gpu};

#[derive(Parser)]
struct Args {
    /// Growth to measure, in MiB.
    #[arg(long, default_value_t = 1024)]
    grow_mib: u64,
    /// Repetitions of each growth measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    grow_runs: usize,
    /// Independent dispatches per measurement.
    #[arg(long, default_value_t = 1000)]
    dispatches: usize,
    /// Bytes each dispatch writes, in KiB.
    #[arg(long, default_value_t = 64)]
    block_kib: u64,
    /// Timed runs of each dispatch layout.
    #[arg(long, default_value_t = 15)]
    timed: u32,
    /// Skip the growth and dispatch measurements.
    #[arg(long)]
    no_grow_dispatches: bool,
    /// Measure `vkAllocateMemory` call by call for several chunk sizes.
    #[arg(long)]
    alloc_sweep: bool,
    /// Memory each size of `--alloc-sweep` allocates, in MiB (4 to 64 calls per size; sizes
    /// that need more than this for 4 calls are skipped).
    #[arg(long, default_value_t = 4096)]
    sweep_total_mib: u64,
    /// Replay this trace through a pool on the GPU under each chunk policy.
    #[arg(long)]
    replay: Option<std::path::PathBuf>,
    /// Chunk policies for `--replay` (repeatable; default: `segments` and the default policy).
    #[arg(long = "chunk-policy")]
    chunk_policies: Vec<String>,
    /// Rounds of `--replay`, each running every policy once.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Allocate `--threads-total-mib` of the chunks' memory type in `--threads-chunk-mib`
    /// allocations spread over each of these thread counts (comma-separated), timed from the
    /// first call to the last: whether the driver's allocations run in parallel.
    #[arg(long, value_delimiter = ',')]
    alloc_threads: Vec<usize>,
    #[arg(long, default_value_t = 2048)]
    threads_total_mib: u64,
    #[arg(long, default_value_t = 32)]
    threads_chunk_mib: u64,
    /// Reserve this many address ranges of `--fill-range-mib` MiB, then map one page in
    /// each of the last `--fill-maps` of them (each map allocates a chunk), printing each
    /// step: where the driver's sparse address space really ends.
    #[arg(long)]
    fill_ranges: Option<u32>,
    #[arg(long, default_value_t = 4096)]
    fill_range_mib: u64,
    #[arg(long, default_value_t = 1)]
    fill_maps: u32,
    /// With `--fill-ranges`: map a page in each range right after reserving it, in a
    /// `PagedMemory` of each range's own (as pools do), instead of the maps at the end.
    #[arg(long)]
    fill_interleave: bool,
}

#[derive(Serialize)]
struct Report {
    adapter: String,
    page_size: u64,
    own_bind_queue: bool,
    binds_ordered_on_gpu: bool,
    grow: Option<Grow>,
    dispatches: Option<Dispatches>,
    alloc_sweep: Option<Vec<SweepRow>>,
    alloc_threads: Option<Vec<ThreadsRow>>,
    replays: Option<Vec<ReplayRow>>,
}

#[derive(Serialize)]
struct ThreadsRow {
    threads: usize,
    round: usize,
    chunk_bytes: u64,
    calls: usize,
    /// From the first call to the last call's return, over all threads.
    wall_ms: f64,
    /// `wall_ms` per GiB allocated.
    ms_per_gib: f64,
    /// Freeing them all, on one thread.
    free_ms: f64,
}

#[derive(Serialize)]
struct SweepRow {
    /// What was timed: `vkAllocateMemory` of pages-mode chunks (each bound before the next
    /// is allocated, or waited for too), `create_buffer`, or `vkAllocateMemory` alone.
    call: String,
    chunk_bytes: u64,
    calls: usize,
    /// Whether the heap budget was queried after every allocation (as `replay --gpu` does).
    budget_query_between: bool,
    mean_ms: f64,
    median_ms: f64,
    first_ms: f64,
    last_ms: f64,
    /// `mean_ms` per MiB, in microseconds.
    us_per_mib: f64,
    /// `vkFreeMemory` (or dropping the buffers) of all of them, per call.
    free_mean_ms: f64,
}

impl SweepRow {
    fn new(call: String, size: u64, times: &[f64], budget_query: bool, free_ms: f64) -> Self {
        const MIB: f64 = (1u64 << 20) as f64;
        let calls = times.len();
        let mean = times.iter().sum::<f64>() / calls as f64;
        SweepRow {
            call,
            chunk_bytes: size,
            calls,
            budget_query_between: budget_query,
            mean_ms: mean,
            median_ms: median(times),
            first_ms: times[0],
            last_ms: times[calls - 1],
            us_per_mib: mean * 1e3 / (size as f64 / MIB),
            free_mean_ms: free_ms / calls as f64,
        }
    }
}

#[derive(Serialize)]
struct ReplayRow {
    round: usize,
    policy: String,
    mode: String,
    peak_reserved_bytes: u64,
    device_memory_peak_bytes: u64,
    device_over_reserved: f64,
    driver_time_s: f64,
    allocation_time_s: f64,
    bind_time_s: f64,
    device_allocations: u64,
    bind_calls: u64,
}

#[derive(Serialize)]
struct Grow {
    bytes: u64,
    runs: usize,
    /// Allocate + bind in one map call (one chunk, one bind), until the call returns.
    pages_one_call_ms: f64,
    /// Of which `vkAllocateMemory`.
    pages_one_call_allocate_ms: f64,
    /// Of which `vkQueueBindSparse` (and, without GPU ordering, its fence wait).
    pages_one_call_bind_ms: f64,
    /// From the call until the GPU has applied the bind (the memory is usable).
    pages_one_call_applied_ms: f64,
    /// The same growth as 20 MiB maps (each a chunk by the default chunk policy and a bind),
    /// until the GPU has applied them all.
    pages_20mib_steps_ms: f64,
    /// Creating the sparse range itself (address space only).
    range_create_ms: f64,
    /// `create_buffer` of the same size.
    create_buffer_ms: f64,
    /// `pages_one_call_applied_ms / create_buffer_ms`: growth until usable, against a new
    /// segment.
    one_call_over_create_buffer: f64,
}

#[derive(Serialize)]
struct Dispatches {
    count: usize,
    block_bytes: u64,
    method: &'static str,
    /// Median GPU time of the pass, per layout, in microseconds.
    one_range_us: f64,
    one_plain_buffer_us: f64,
    separate_buffers_us: f64,
    one_range_aliases_us: f64,
    /// Blocks of one range through 16 wrappers in turn: a wrapper seen again in the pass
    /// gets a barrier, which waits for all earlier work.
    one_range_16_aliases_us: f64,
    /// Blocks of a pool in pages mode (`expandable_segments:True`), through its wrappers.
    pool_pages_us: f64,
    /// Blocks of a fixed-segment pool (`expandable_segments:False`).
    pool_segments_us: f64,
    /// `one_range_us / separate_buffers_us`: above 1.05, sharing one buffer costs.
    one_range_over_separate: f64,
    one_range_aliases_over_separate: f64,
    one_range_16_aliases_over_separate: f64,
    pool_pages_over_separate: f64,
    pool_segments_over_separate: f64,
    /// Wrappers the pool in pages mode's blocks came through (distinct buffers).
    pool_pages_wrappers: usize,
}

const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let gpu = GpuContext::headless(&HeadlessOptions::default())?;
    let sparse = gpu.page_mapping()?;
    if let Some(ranges) = args.fill_ranges {
        let mut memory = paged(&gpu)?;
        let size = (args.fill_range_mib << 20).min(memory.max_range());
        eprintln!(
            "address space {} range {size}",
            sparse.facts().address_space
        );
        if args.fill_interleave {
            // Each range in a memory of its own, as pools hold them.
            drop(memory);
            let page = sparse.page_size();
            let mut all = Vec::new();
            for id in 0..ranges {
                let mut own = paged(&gpu)?;
                if let Err(error) = own.reserve_range(0, size) {
                    eprintln!("FILL reserve {id} failed: {error}");
                    return Ok(());
                }
                eprintln!("FILL map {id}");
                if let Err(error) = own.map(0, &[(0, page)]) {
                    eprintln!("FILL map {id} failed: {error}");
                    return Ok(());
                }
                all.push(own);
            }
            eprintln!("FILL ok");
            return Ok(());
        }
        for id in 0..ranges {
            if let Err(error) = memory.reserve_range(id, size) {
                eprintln!("FILL reserve {id} failed: {error}");
                return Ok(());
            }
        }
        eprintln!(
            "FILL reserved {ranges} ranges, {} bytes",
            u64::from(ranges) * size
        );
        let page = sparse.page_size();
        for id in ranges.saturating_sub(args.fill_maps)..ranges {
            eprintln!("FILL map {id}");
            memory.map(id, &[(0, page)])?;
        }
        memory.wait_for_binds()?;
        eprintln!("FILL ok");
        return Ok(());
    }
    let (grow, dispatches) = if args.no_grow_dispatches {
        (None, None)
    } else {
        (
            Some(measure_grow(&gpu, &args)?),
            Some(measure_dispatches(&gpu, &args)?),
        )
    };
    let alloc_sweep = if args.alloc_sweep {
        Some(measure_alloc_sweep(&gpu, args.sweep_total_mib << 20)?)
    } else {
        None
    };
    let alloc_threads = if args.alloc_threads.is_empty() {
        None
    } else {
        Some(measure_alloc_threads(&gpu, &args)?)
    };
    let replays = match &args.replay {
        Some(path) => Some(measure_replays(&gpu, &args, path)?),
        None => None,
    };
    let report = Report {
        adapter: gpu.info().name.clone(),
        page_size: sparse.page_size(),
        own_bind_queue: sparse.facts().own_queue,
        binds_ordered_on_gpu: sparse.orders_on_gpu(),
        grow,
        dispatches,
        alloc_sweep,
        alloc_threads,
        replays,
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn paged(gpu: &GpuContext) -> Result<PagedMemory, Box<dyn std::error::Error>> {
    paged_with(gpu, ChunkPolicy::default())
}

fn paged_with(
    gpu: &GpuContext,
    policy: ChunkPolicy,
) -> Result<PagedMemory, Box<dyn std::error::Error>> {
    Ok(PagedMemory::new(
        gpu.device(),
        gpu.queue(),
        USAGE,
        "page_costs",
        policy,
    )?)
}

/// Chunks of each size, mapped one after another into one range: every map allocates one
/// chunk of exactly that size (the policy's smallest and largest chunk), timed call by call.
fn measure_alloc_sweep(
    gpu: &GpuContext,
    total: u64,
) -> Result<Vec<SweepRow>, Box<dyn std::error::Error>> {
    const MIB: u64 = 1 << 20;
    let page = gpu.page_mapping()?.page_size();
    // (size, query the heap budget after each map, wait for each bind before the next map)
    let sizes = [
        (2 * MIB, false, false),
        (8 * MIB, false, false),
        (32 * MIB, false, false),
        (32 * MIB - page, false, false),
        (32 * MIB, true, false),
        (64 * MIB, false, false),
        (64 * MIB, false, true),
        (256 * MIB, false, false),
        (256 * MIB, false, true),
        (1024 * MIB, false, false),
    ];
    let mut rows = Vec::new();
    for (size, budget_query, wait) in sizes {
        if 4 * size > total {
            continue;
        }
        let policy = ChunkPolicy::default()
            .with_min_chunk(size)
            .with_max_chunk(size)
            .with_granule(page)
            .with_spare_on_large(false)
            .with_device_divisor(0)
            .with_bind_spare(false);
        let mut memory = paged_with(gpu, policy)?;
        // One range holds them all.
        let calls = (total / size).min(memory.max_range() / size).clamp(4, 64) as usize;
        if size * calls as u64 > memory.max_range() {
            continue;
        }
        memory.reserve_range(0, size * calls as u64)?;
        let mut times = Vec::with_capacity(calls);
        for i in 0..calls {
            let before = memory.counters().chunks.time;
            memory.map(0, &[(i as u64 * size, size)])?;
            times.push(ms(memory.counters().chunks.time - before));
            if budget_query {
                std::hint::black_box(gpu.memory_info());
            }
            if wait {
                memory.wait_for_binds()?;
            }
        }
        let before = memory.counters().chunks.time;
        memory.unmap(0, &[(0, size * calls as u64)])?;
        memory.release_idle(u64::MAX);
        let free_total = ms(memory.counters().chunks.time - before);
        drop(memory);
        gpu.wait_idle()?;
        let call = if wait {
            "vkAllocateMemory, each bind waited for"
        } else {
            "vkAllocateMemory"
        };
        rows.push(SweepRow::new(
            call.into(),
            size,
            &times,
            budget_query,
            free_total,
        ));
        if wait {
            rows.extend(sweep_plain_allocations(gpu, size, calls)?);
        } else if !budget_query {
            rows.push(sweep_create_buffer(gpu, size, calls)?);
        }
    }
    Ok(rows)
}

/// `calls` plain `vkAllocateMemory` of `size` bytes, bound to nothing and all kept alive,
/// for each device-local memory type that is not host-visible, timed call by call.
fn sweep_plain_allocations(
    gpu: &GpuContext,
    size: u64,
    calls: usize,
) -> Result<Vec<SweepRow>, Box<dyn std::error::Error>> {
    use ash::vk;
    let chunk_type = gpu.page_mapping()?.facts().memory_type;
    // SAFETY: the device is wgpu's Vulkan device; the handles are used while it lives.
    let hal =
        unsafe { gpu.device().as_hal::<wgpu::hal::api::Vulkan>() }.ok_or("not a Vulkan device")?;
    let raw = hal.raw_device();
    // SAFETY: the physical device belongs to this instance.
    let properties = unsafe {
        hal.shared_instance()
            .raw_instance()
            .get_physical_device_memory_properties(hal.raw_physical_device())
    };
    let mut rows = Vec::new();
    for index in 0..properties.memory_type_count {
        let flags = properties.memory_types[index as usize].property_flags;
        if !flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
            || flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
        {
            continue;
        }
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(index);
        let mut memories = Vec::with_capacity(calls);
        let mut times = Vec::with_capacity(calls);
        let mut failed = None;
        for _ in 0..calls {
            let start = Instant::now();
            // SAFETY: a plain allocation of one of this device's memory types.
            match unsafe { raw.allocate_memory(&info, None) } {
                Ok(memory) => {
                    times.push(ms(start.elapsed()));
                    memories.push(memory);
                }
                Err(result) => {
                    failed = Some(result);
                    break;
                }
            }
        }
        let start = Instant::now();
        for memory in memories {
            // SAFETY: allocated above, bound to nothing, freed once.
            unsafe { raw.free_memory(memory, None) };
        }
        let free_total = ms(start.elapsed());
        if let Some(result) = failed {
            return Err(format!("vkAllocateMemory of type {index}: {result}").into());
        }
        let chunks = if index == chunk_type {
            ", the chunks' type"
        } else {
            ""
        };
        rows.push(SweepRow::new(
            format!("vkAllocateMemory alone, memory type {index}{chunks}"),
            size,
            &times,
            false,
            free_total,
        ));
    }
    Ok(rows)
}

/// Plain `vkAllocateMemory` of the chunks' memory type, the same calls spread over 1 to N
/// threads, three rounds in turn: if the driver serializes its allocations, the wall time
/// stays the same whatever the thread count.
fn measure_alloc_threads(
    gpu: &GpuContext,
    args: &Args,
) -> Result<Vec<ThreadsRow>, Box<dyn std::error::Error>> {
    use ash::vk;
    let chunk_type = gpu.page_mapping()?.facts().memory_type;
    // SAFETY: the device is wgpu's Vulkan device; the handles are used while it lives.
    let hal =
        unsafe { gpu.device().as_hal::<wgpu::hal::api::Vulkan>() }.ok_or("not a Vulkan device")?;
    let raw = hal.raw_device().clone();
    let size = args.threads_chunk_mib << 20;
    let calls = (args.threads_total_mib / args.threads_chunk_mib).max(1) as usize;
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(size)
        .memory_type_index(chunk_type);
    let mut rows = Vec::new();
    for round in 1..=3 {
        for &threads in &args.alloc_threads {
            let threads = threads.max(1);
            let start = Instant::now();
            let results: Vec<Result<Vec<vk::DeviceMemory>, vk::Result>> =
                std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..threads)
                        .map(|t| {
                            let raw = &raw;
                            let info = &info;
                            scope.spawn(move || {
                                let mine = (t..calls).step_by(threads).count();
                                let mut memories = Vec::with_capacity(mine);
                                for _ in 0..mine {
                                    // SAFETY: a plain allocation of one of this device's
                                    // memory types; Vulkan allows it from any thread.
                                    memories.push(unsafe { raw.allocate_memory(info, None) }?);
                                }
                                Ok(memories)
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().expect("an allocating thread panicked"))
                        .collect()
                });
            let wall = start.elapsed();
            let start = Instant::now();
            let mut failed = None;
            for result in results {
                match result {
                    Ok(memories) => {
                        for memory in memories {
                            // SAFETY: allocated above, bound to nothing, freed once.
                            unsafe { raw.free_memory(memory, None) };
                        }
                    }
                    Err(error) => failed = Some(error),
                }
            }
            let free = start.elapsed();
            if let Some(error) = failed {
                return Err(format!("vkAllocateMemory on {threads} threads: {error}").into());
            }
            rows.push(ThreadsRow {
                threads,
                round,
                chunk_bytes: size,
                calls,
                wall_ms: ms(wall),
                ms_per_gib: ms(wall) / (size as f64 * calls as f64 / (1u64 << 30) as f64),
                free_ms: ms(free),
            });
        }
    }
    Ok(rows)
}

/// One `create_buffer` of `size` bytes inside an error scope, and the milliseconds it took.
fn timed_create_buffer(
    gpu: &GpuContext,
    size: u64,
    label: &str,
) -> Result<(wgpu::Buffer, f64), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let buffer = catch(gpu.device(), || {
        gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: USAGE,
            mapped_at_creation: false,
        })
    })?;
    Ok((buffer, ms(start.elapsed())))
}

/// `calls` buffers of `size` bytes from `create_buffer`, all alive until the end, timed call
/// by call.
fn sweep_create_buffer(
    gpu: &GpuContext,
    size: u64,
    calls: usize,
) -> Result<SweepRow, Box<dyn std::error::Error>> {
    let mut buffers = Vec::with_capacity(calls);
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let (buffer, took) = timed_create_buffer(gpu, size, "page_costs sweep")?;
        times.push(took);
        buffers.push(buffer);
    }
    let start = Instant::now();
    for buffer in buffers {
        buffer.destroy();
    }
    gpu.wait_idle()?;
    let free_total = ms(start.elapsed());
    Ok(SweepRow::new(
        "create_buffer".into(),
        size,
        &times,
        false,
        free_total,
    ))
}

fn parse_policy(spec: &str) -> Result<Option<ChunkPolicy>, Box<dyn std::error::Error>> {
    if spec == "segments" {
        return Ok(None);
    }
    let fields: Vec<u64> = spec
        .split(',')
        .map(|f| f.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("chunk policy {spec:?}: {e}"))?;
    let [
        min,
        max,
        divisor,
        granule_kib,
        spare,
        device_divisor,
        bind_spare,
    ] = fields[..]
    else {
        return Err(format!(
            "chunk policy {spec:?}: expected \
             MIN_MIB,MAX_MIB,DIVISOR,GRANULE_KIB,SPARE,DEVICE_DIVISOR,BIND_SPARE"
        )
        .into());
    };
    Ok(Some(
        ChunkPolicy::default()
            .with_min_chunk(min << 20)
            .with_max_chunk(max << 20)
            .with_divisor(divisor)
            .with_granule(granule_kib << 10)
            .with_spare_on_large(spare != 0)
            .with_device_divisor(device_divisor)
            .with_bind_spare(bind_spare != 0),
    ))
}

fn measure_replays(
    gpu: &GpuContext,
    args: &Args,
    path: &std::path::Path,
) -> Result<Vec<ReplayRow>, Box<dyn std::error::Error>> {
    let trace = read_trace(path, &ReadOptions::default())?;
    let specs = if args.chunk_policies.is_empty() {
        vec![
            "segments".to_string(),
            "2,256,128,2048,1,2048,1".to_string(),
        ]
    } else {
        args.chunk_policies.clone()
    };
    let policies = specs
        .iter()
        .map(|spec| parse_policy(spec))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::new();
    for round in 1..=args.rounds.max(1) {
        for (spec, policy) in specs.iter().zip(&policies) {
            let (config, options) = match policy {
                None => (
                    Config::parse("expandable_segments:False")?,
                    GpuReplayOptions::default(),
                ),
                Some(policy) => (
                    Config::default(),
                    GpuReplayOptions::default().with_chunk_policy(*policy),
                ),
            };
            let r = replay_on_gpu(&trace, &config, gpu, &options)?;
            rows.push(ReplayRow {
                round,
                policy: spec.clone(),
                mode: format!("{:?}", r.mode),
                peak_reserved_bytes: r.peak_reserved_bytes,
                device_memory_peak_bytes: r.device_memory_peak_bytes,
                device_over_reserved: r.device_over_reserved,
                driver_time_s: r.driver_time_s,
                allocation_time_s: r.allocation_time_s,
                bind_time_s: r.bind_time_s,
                device_allocations: r.device_allocations,
                bind_calls: r.bind_calls,
            });
            gpu.wait_idle()?;
        }
    }
    Ok(rows)
}

fn measure_grow(gpu: &GpuContext, args: &Args) -> Result<Grow, Box<dyn std::error::Error>> {
    let bytes = args.grow_mib << 20;
    let step = 20u64 << 20;
    let (mut one, mut applied, mut allocate, mut bind, mut steps, mut range, mut create) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..args.grow_runs.max(1) {
        let mut memory = paged(gpu)?;
        let size = bytes.div_ceil(memory.page_size()) * memory.page_size();
        let start = Instant::now();
        memory.reserve_range(0, size)?;
        range.push(ms(start.elapsed()));
        let start = Instant::now();
        memory.map(0, &[(0, size)])?;
        one.push(ms(start.elapsed()));
        memory.wait_for_binds()?;
        applied.push(ms(start.elapsed()));
        let counters = memory.counters();
        allocate.push(ms(counters.chunks.time));
        bind.push(ms(counters.bind_time));
        drop(memory);

        let mut memory = paged(gpu)?;
        memory.reserve_range(0, size)?;
        let start = Instant::now();
        let mut at = 0;
        while at < size {
            let len = step.min(size - at);
            memory.map(0, &[(at, len)])?;
            at += len;
        }
        memory.wait_for_binds()?;
        steps.push(ms(start.elapsed()));
        drop(memory);

        let (buffer, took) = timed_create_buffer(gpu, size, "page_costs segment")?;
        create.push(took);
        buffer.destroy();
        gpu.wait_idle()?;
    }
    let applied_median = median(&applied);
    let create_buffer = median(&create);
    Ok(Grow {
        bytes,
        runs: one.len(),
        pages_one_call_ms: median(&one),
        pages_one_call_allocate_ms: median(&allocate),
        pages_one_call_bind_ms: median(&bind),
        pages_one_call_applied_ms: applied_median,
        pages_20mib_steps_ms: median(&steps),
        range_create_ms: median(&range),
        create_buffer_ms: create_buffer,
        one_call_over_create_buffer: applied_median / create_buffer,
    })
}

fn measure_dispatches(
    gpu: &GpuContext,
    args: &Args,
) -> Result<Dispatches, Box<dyn std::error::Error>> {
    let device = gpu.device();
    let kernels = Kernels::new(device, gpu.queue());
    let block = args.block_kib << 10;
    let count = args.dispatches;
    let total = block * count as u64;

    let mut memory = paged(gpu)?;
    let size = total.div_ceil(memory.page_size()) * memory.page_size();
    memory.reserve_range(0, size)?;
    memory.map(0, &[(0, size)])?;
    let range = memory.buffer(0).expect("reserved").clone();
    let aliases: Vec<wgpu::Buffer> = (0..count)
        .map(|_| memory.alias_buffer(0))
        .collect::<Result<_, _>>()?;
    let pool_blocks =
        |conf: &str, mode: MemoryMode| -> Result<Vec<Block>, Box<dyn std::error::Error>> {
            let pool = Pool::from_context(gpu, Config::parse(conf)?)?;
            if pool.memory_mode() != mode {
                return Err(format!("{conf} gave a {:?} pool", pool.memory_mode()).into());
            }
            Ok((0..count)
                .map(|_| pool.alloc(block))
                .collect::<Result<_, _>>()?)
        };
    let pages_blocks = pool_blocks("expandable_segments:True", MemoryMode::Pages)?;
    let segment_blocks = pool_blocks("expandable_segments:False", MemoryMode::Segments)?;
    let mut pool_wrappers: Vec<&wgpu::Buffer> = Vec::new();
    for buffer in pages_blocks.iter().map(Block::buffer) {
        if !pool_wrappers.contains(&buffer) {
            pool_wrappers.push(buffer);
        }
    }
    let pool_pages_wrappers = pool_wrappers.len();
    let make = |size: u64| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("page_costs"),
            size,
            usage: USAGE,
            mapped_at_creation: false,
        })
    };
    let plain = make(total);
    let separate: Vec<wgpu::Buffer> = (0..count).map(|_| make(block)).collect();

    let prepare = |operands: Vec<Operand<'_>>| -> Result<Vec<PreparedKernel>, KernelError> {
        operands
            .into_iter()
            .enumerate()
            .map(|(i, operand)| kernels.prepare(&KernelCall::fill(operand, i as u32)))
            .collect()
    };
    let at = |i: usize| i as u64 * block;
    let layouts = [
        prepare(
            (0..count)
                .map(|i| Operand::new(&range, at(i), block))
                .collect(),
        )?,
        prepare(
            (0..count)
                .map(|i| Operand::new(&plain, at(i), block))
                .collect(),
        )?,
        prepare(
            (0..count)
                .map(|i| Operand::new(&separate[i], 0, block))
                .collect(),
        )?,
        prepare(
            (0..count)
                .map(|i| Operand::new(&aliases[i], at(i), block))
                .collect(),
        )?,
        prepare(
            (0..count)
                .map(|i| Operand::new(&aliases[i % 16], at(i), block))
                .collect(),
        )?,
        prepare(pages_blocks.iter().map(Block::operand).collect())?,
        prepare(segment_blocks.iter().map(Block::operand).collect())?,
    ];
    let timer = Timer::new(device, gpu.queue(), false);
    let counts = RunCounts {
        warmup: 3,
        min_warmup: Duration::from_millis(500),
        timed: args.timed.max(1),
    };
    let mut medians = Vec::new();
    let mut method = "wall";
    for prepared in &layouts {
        let measurement = timer.measure_pass(counts, |encoder, timestamps| {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("page_costs dispatches"),
                timestamp_writes: timestamps,
            });
            for kernel in prepared {
                kernel.record_in_pass(&mut pass);
            }
        })?;
        method = measurement.method.as_str();
        medians.push(measurement.median_ns / 1e3);
    }
    Ok(Dispatches {
        count,
        block_bytes: block,
        method,
        one_range_us: medians[0],
        one_plain_buffer_us: medians[1],
        separate_buffers_us: medians[2],
        one_range_aliases_us: medians[3],
        one_range_16_aliases_us: medians[4],
        pool_pages_us: medians[5],
        pool_segments_us: medians[6],
        one_range_over_separate: medians[0] / medians[2],
        one_range_aliases_over_separate: medians[3] / medians[2],
        one_range_16_aliases_over_separate: medians[4] / medians[2],
        pool_pages_over_separate: medians[5] / medians[2],
        pool_segments_over_separate: medians[6] / medians[2],
        pool_pages_wrappers,
    })
}
