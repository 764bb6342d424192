#!/usr/bin/env python3
"""Splits a `perf record --call-graph dwarf` profile of `wgpool replay --gpu` into the parts of
the GPU pool's cost that issue 21 asks for: the engine, locks, handle creation (allocating
and freeing block records), page bookkeeping (the page-mapping layer), wrapper lookup,
statistics and history, submission tracking, the driver (Vulkan calls through wgpu-hal and
the ICD), wgpu-core, and the replay harness itself (trace parsing and the replay loop).

Each sample is charged to the first category, walking from the innermost frame outwards,
whose pattern matches a frame; samples outside the replay (start-up, trace parsing) are
reported apart. Usage:

    perf record --call-graph dwarf,16384 -F 4000 -o P.data wgpool replay T --gpu ...
    perf script -i P.data | python3 tools/perf_split.py [--ops N --freq F]

With --ops and --freq (the -F given to perf record), prints nanoseconds per operation.
Standard library only.
"""

import collections
import re
import sys

# A sample is charged to the innermost frame of wgpool's own code (the code responsible for
# it): its module names the category. Time in a lock, the driver or wgpu-core under that
# frame is split out where it says more than the module (a pool lock, the memory layer's
# driver calls).
MODULES = [
    ("engine", r"wgpool::engine::"),
    ("wrapper lookup", r"wgpool::pool::wrappers::"),
    ("page bookkeeping", r"wgpool::gpu::sparse::|wgpool::pool::backing::"),
    ("submission tracking", r"wgpool::pool::recordings|wgpool::pool::submissions"),
    ("statistics and history", r"wgpool::history::|device_memory_usage|usage_report|memory_stats"),
    ("reuse cache", r"wgpool::pool::reuse_cache::"),
    ("handle creation", r"Block::new|BlockParts::new|drop_in_place<wgpool::pool::block|wgpool::pool::block::"),
    ("pool", r"wgpool::pool::"),
    ("replay harness", r"wgpool::trace::gpu_replay::"),
]
LEAVES = [
    ("locks", r"pthread_mutex|__lll_lock|futex|pthread_cond|std::sys::sync::mutex"),
    ("driver", r"libvulkan|vk_|lvp_|ash::|wgpu_hal::|libgallium|llvmpipe|libLLVM"),
    ("wgpu-core", r"wgpu_core::|wgpu::backend|wgpu::api"),
    ("allocator", r"malloc|cfree|__rust_alloc|__rust_dealloc|_int_free|_int_malloc|__libc_free"),
]
OUTSIDE = r"wgpool::trace::parse|wgpool::trace::lines|wgpool::trace::input|read_trace"
INSIDE = r"gpu_replay::replay_once|gpu_replay::replay_on_gpu"
# The engine-alone baseline that `replay --gpu` runs after the pool's replay.
BASELINE = r"engine_baseline|wgpool::trace::replay::run_once"


# Charged wherever they are in the stack: wgpu calls back into wgpool (the queue gate) from
# under these, which would otherwise take the charge.
ANYWHERE = [
    ("wrapper orderings (empty submissions)", r"order_after_submitted"),
]
# wgpool frames that run as callbacks inside wgpu, charged to whatever called wgpu.
CALLBACKS = r"wgpool::gpu::sparse::gate::"


def category(stack):
    """The category of a sample whose frames run innermost first."""
    for name, pattern in ANYWHERE:
        if any(re.search(pattern, frame) for frame in stack):
            return name
    leaf = next((n for n, p in LEAVES if re.search(p, stack[0])), None) if stack else None
    for frame in stack:
        if "wgpool::" not in frame or re.search(CALLBACKS, frame):
            continue
        module = next((n for n, p in MODULES if re.search(p, frame)), "other")
        if leaf == "locks" and module in ("pool", "handle creation"):
            return "locks (pool)"
        if leaf in ("driver", "wgpu-core") and module == "page bookkeeping":
            return "page bookkeeping: driver"
        if leaf == "allocator":
            return "handle creation"
        return module
    return "other"


def frames(block):
    for line in block[1:]:
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            yield parts[1]


def main():
    ops = freq = None
    if "--ops" in sys.argv:
        ops = int(sys.argv[sys.argv.index("--ops") + 1])
    if "--freq" in sys.argv:
        freq = int(sys.argv[sys.argv.index("--freq") + 1])
    inside, outside = collections.Counter(), 0
    total = 0
    block = []
    freq = None
    for line in sys.stdin:
        if line.strip() == "":
            if block:
                total += 1
                stack = list(frames(block))
                if not any(re.search(INSIDE, f) for f in stack) or any(
                    re.search(BASELINE, f) for f in stack
                ):
                    outside += 1
                else:
                    inside[category(stack)] += 1
                block = []
            continue
        block.append(line)
    replay = sum(inside.values())
    print(f"samples: {total} in all, {replay} inside replay_on_gpu, {outside} outside")
    for name, count in inside.most_common():
        share = 100.0 * count / max(replay, 1)
        line = f"  {name:<42} {count:>7} {share:6.1f}%"
        if ops and freq:
            line += f"  {count / freq / ops * 1e9:8.1f} ns/op"
        print(line)


if __name__ == "__main__":
    main()
