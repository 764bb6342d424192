//! Property tests of the placement engine.
//!
//! Random operation sequences (allocations of 1 B to 1 GiB, log-uniformly distributed, on
//! three streams; frees of random live blocks; `empty_cache`; `reset_peak_stats`; stale
//! frees and zero-byte requests; see [`inputs`]) run against [`Engine`] over
//! [`VirtualSegments`] under random configurations that mix every `WGPOOL_CONF` option, caps
//! and simulated device limits. After every operation the engine is compared with an
//! independent model of the live blocks ([`model::Model`], shared by both harnesses);
//! under `policy:pytorch` every placement is also compared with PyTorch's best-fit rule,
//! computed here from the previous snapshot ([`segments`]).
//!
//! Pages mode ([`pages`]) gets the same sequences on a simulated device that maps pages (an
//! H200's, or small pages and short ranges), under every option pages mode accepts, with
//! the same model plus the device's own record of what is mapped: no live byte on an
//! unmapped page, the page statistics equal to the device's, physical memory (mapped and
//! spare) never over a cap (under `policy:pytorch`, never a large page over it, as PyTorch
//! checks the cap before mapping), a free never mapping or unmapping, `empty_cache`
//! returning every idle page, and an out-of-memory only once the retry chain has returned
//! every idle page and the request's pages do not fit.
//!
//! The tests also replay `tests/data/gpt2-train.csv` (from `shared/traces`) with the
//! invariants checked after every operation ([`cases`]).
//!
//! [`Engine`]: wgpool::engine::Engine
//! [`VirtualSegments`]: wgpool::engine::VirtualSegments

/// Returns `Err(message)` from the enclosing function when `cond` is false.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

mod cases;
mod inputs;
mod model;
mod pages;
mod segments;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
