//! What the GPU test binaries share: one device per binary, and a lock for the few tests that
//! need a device of their own.
//!
//! Creating and destroying a device in every test, from the test harness's many threads at
//! once, hung NVIDIA's Vulkan driver (580, on an H200) in 5 of 8 runs of the kernel tests and
//! crashed it in one; with one shared device the same binary passed 6 runs of 6. One device
//! shared by many threads is also what an application has. wgpu's error scopes are per
//! thread, so tests that share the device do not catch each other's errors.

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
