//! What the GPU test binaries share: one device per binary, and a lock for the few tests that
//! need a device of their own.
//!
//! Creating and destroying a device in every test, from the test harness's many threads at
//! once, hung NVIDIA's Vulkan driver (580, on an H200) in 5 of 8 runs of the kernel tests and
//! crashed it in one; with one shared device the same binary passed 6 runs of 6. One device
//! shared by many threads is also what an application has. wgpu's error scopes are per
//! thread, so tests that share the device do not catch each other's errors.
//!
//! This folder is the tests' only helper folder. Its other files are included by the few
//! binaries that use them, with `#[path = "common/FILE.rs"] mod NAME;`, rather than from here,
//! so that a binary compiles only what it needs: `mlp.rs` (a small MLP on pool blocks,
//! checked against the CPU) and `random_mix.rs` (random allocation mixes as traces, drawn from
//! `bench::rng`).

// Each test binary uses part of this module.
#![allow(dead_code)]

use std::ops::Deref;
use std::sync::{Mutex, MutexGuard, OnceLock};

use wgpool::gpu::{GpuContext, HeadlessOptions};

/// Held while a device is created or destroyed, and for the whole life of a test's own
/// device.
static LIFECYCLE: Mutex<()> = Mutex::new(());

fn lifecycle() -> MutexGuard<'static, ()> {
    // A test that failed while holding the lock poisons it; the lock itself is still good.
    LIFECYCLE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The binary's shared device on the default adapter (lavapipe in CI).
pub fn gpu() -> &'static GpuContext {
    static SHARED: OnceLock<GpuContext> = OnceLock::new();
    SHARED.get_or_init(|| {
        let _creating = lifecycle();
        GpuContext::headless(&HeadlessOptions::default()).unwrap_or_else(|error| {
            panic!(
                "GPU tests need an adapter and found none usable: {error}\n\
                 (install lavapipe: apt-get install -y mesa-vulkan-drivers libvulkan1; set WGPU_BACKEND=vulkan)"
            )
        })
    })
}

/// Something that owns a device of a test's own, created and dropped while no other
/// device is.
pub struct Own<T> {
    // Fields drop in order: the device first, then the lock.
    value: T,
    _lifecycle: MutexGuard<'static, ()>,
}

impl<T> Deref for Own<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

/// Makes a device of the test's own with `make`, for tests that read device-wide state (the
/// allocator report) or need other features than the shared device. Other such tests wait
/// until this one's device is dropped.
pub fn own<T>(make: impl FnOnce() -> T) -> Own<T> {
    // The shared device exists first, so that creating it never waits on this lock.
    let _ = gpu();
    let guard = lifecycle();
    Own {
        value: make(),
        _lifecycle: guard,
    }
}

/// A compute pipeline (automatic layout) whose kernel sets every word of the storage buffer
/// at group 0, binding 0 to `0xFFFF_FFFF`, 64 invocations a workgroup: for tests that check
/// where an application's own bind group lets a kernel write.
pub fn fill_ones_pipeline(device: &wgpu::Device) -> wgpu::ComputePipeline {
    const FILL_ONES: &str = "
@group(0) @binding(0) var<storage, read_write> d: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&d)) {
        d[id.x] = 0xFFFFFFFFu;
    }
}
";
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("fill ones"),
        source: wgpu::ShaderSource::Wgsl(FILL_ONES.into()),
    });
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("fill ones"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// The bytes `fill_pattern` writes for `seed` over `bytes` bytes.
pub fn pattern_bytes(seed: u32, bytes: u64) -> Vec<u8> {
    let words: Vec<u32> = (0..bytes.div_ceil(4) as u32)
        .map(|i| wgpool::kernels::pattern_word(seed, i))
        .collect();
    let mut out: Vec<u8> = bytemuck::cast_slice(&words).to_vec();
    out.truncate(bytes as usize);
    out
}

/// Warnings logged through the `log` crate in this test binary.
pub struct CapturedLog(Mutex<Vec<String>>);

impl CapturedLog {
    /// Every warning logged so far, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The warnings of the pool labelled `label` (those that start with `label:`), oldest
    /// first.
    pub fn lines_of(&self, label: &str) -> Vec<String> {
        let prefix = format!("{label}:");
        self.lines()
            .into_iter()
            .filter(|line| line.starts_with(&prefix))
            .collect()
    }
}

impl log::Log for CapturedLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }
    fn log(&self, record: &log::Record<'_>) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(record.args().to_string());
    }
    fn flush(&self) {}
}

/// The test binary's logger, installed on first use: it keeps every warning. Tests share it,
/// so each looks only for its own lines (by the pool label the message starts with).
pub fn captured_log() -> &'static CapturedLog {
    static LOG: OnceLock<&'static CapturedLog> = OnceLock::new();
    LOG.get_or_init(|| {
        let sink: &'static CapturedLog = Box::leak(Box::new(CapturedLog(Mutex::default())));
        log::set_logger(sink).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Warn);
        sink
    })
}

/// Runs `test` on a thread of its own and ends the whole binary with a failure if it has not
/// returned within `limit`: for tests whose failure would otherwise be a GPU that waits for
/// ever (a panic in `test` fails the calling test as usual).
pub fn within(limit: std::time::Duration, test: fn()) {
    let (done, finished) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        test();
        let _ = done.send(());
    });
    match finished.recv_timeout(limit) {
        Ok(()) => runner.join().expect("the test returned"),
        // The sender went away without sending: the test panicked.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = runner.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            eprintln!("the test did not finish within {limit:?}: the GPU waits for ever");
            std::process::exit(101);
        }
    }
}
