//! An asymmetric memory fence: a cheap side that costs one compiler fence, and a heavy side
//! that makes every thread of the process execute a full memory barrier.
//!
//! Two threads that each store one flag and then load the other's (Dekker's pattern) need a
//! full fence between the store and the load on both sides, or one of them may read a stale
//! flag. Where one side runs millions of times and the other almost never, the heavy side
//! can do the work of both: Linux's `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` sends an
//! inter-processor interrupt to every CPU that runs a thread of this process, and each of
//! them executes a full barrier before the call returns (a thread not running passes one when
//! it is scheduled again). The cheap side then needs only to keep the compiler from moving its
//! load above its store.
//!
//! Guarantee: when [`heavy`] returns `true`, every store a thread made before its
//! [`light`] is visible to the caller's later loads, or that thread's load after its
//! [`light`] sees every store the caller made before [`heavy`] (or both).
//!
//! [`available`] says whether this process can use the heavy side: Linux only, and only
//! where the kernel (4.14 or later) accepts the registration. Elsewhere callers must not rely
//! on [`light`] at all.

use std::sync::OnceLock;
use std::sync::atomic::{Ordering, compiler_fence};

/// The cheap side: keeps the compiler from reordering memory accesses across it; the CPU
/// may still reorder a store before a later load, which [`heavy`] on another thread undoes.
#[inline(always)]
pub(crate) fn light() {
    compiler_fence(Ordering::SeqCst);
}

/// Whether [`heavy`] works in this process: asked once (the registration is process-wide).
pub(crate) fn available() -> bool {
    *AVAILABLE.get_or_init(membarrier::register)
}

static AVAILABLE: OnceLock<bool> = OnceLock::new();

/// Whether [`available`] has been asked already (the registration is done or refused).
pub(crate) fn asked() -> bool {
    AVAILABLE.get().is_some()
}

/// The heavy side: a full barrier on every running thread of the process. `false` if the
/// fence is not [`available`] or the kernel refused it; then nothing is guaranteed.
#[cold]
pub(crate) fn heavy() -> bool {
    available() && membarrier::private_expedited()
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod membarrier {
    /// Kernel ABI (include/uapi/linux/membarrier.h).
    const CMD_QUERY: libc::c_long = 0;
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    #[allow(unsafe_code)]
    fn call(command: libc::c_long) -> libc::c_long {
        // SAFETY: membarrier takes two integers and a CPU number and touches no memory of
        // the caller's; an unknown command or a seccomp filter gives -1, which is handled.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                command,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        }
    }

    /// Registers the process for private expedited barriers, after checking that the kernel
    /// offers them; then issues one, so that a kernel that accepts the registration but
    /// refuses the command is found now rather than when a thread depends on it.
    pub(super) fn register() -> bool {
        let offered = call(CMD_QUERY);
        offered >= 0
            && offered & CMD_PRIVATE_EXPEDITED != 0
            && call(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
            && private_expedited()
    }

    pub(super) fn private_expedited() -> bool {
        call(CMD_PRIVATE_EXPEDITED) == 0
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod membarrier {
    pub(super) fn register() -> bool {
        false
    }

    pub(super) fn private_expedited() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn the_heavy_side_works_wherever_it_is_offered() {
        // On Linux 4.14+ without a seccomp filter against it (the CI machines), the fence is
        // there, and once registered it keeps working.
        if available() {
            assert!(heavy());
            assert!(heavy());
        } else {
            assert!(!heavy(), "an unavailable fence never claims to have run");
        }
    }
}
