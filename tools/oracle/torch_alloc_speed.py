#!/usr/bin/env python3
"""How long PyTorch's CUDA caching allocator takes to replay a trace, timed from C++.

Usage (on a machine with CUDA and PyTorch; the extension builds with the C++ compiler
PyTorch's `cpp_extension` finds):

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \\
        python3 tools/oracle/torch_alloc_speed.py TRACE.csv [--repeat N] [--scale N]

Replays the trace's `alloc` and `free` rows (wgpool's CSV, as `wgpool replay` reads it) through
`c10::cuda::CUDACachingAllocator::raw_alloc` / `raw_delete` in a C++ loop, so that the time
is the allocator's and the driver's, not Python's. Each run frees what the trace leaves
live (untimed) and then releases the cache (`emptyCache`, untimed), so that every run starts
as the first did; the first run of the process is a cold start. Sizes are divided by
`--scale` (rounded up), as `wgpool replay --gpu --scale` does. `oom` rows are skipped.

Prints one JSON object: `{trace, conf, ops, scale, runs: [seconds...], first_s,
rest_median_s, ns_per_op_first, ns_per_op_rest_median, torch, device}`.
"""

import argparse
import json
import os
import statistics
import sys

CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <chrono>
#include <vector>

// ops: kind (0 alloc, 1 free), slot, size. Returns seconds for the loop.
double replay(const std::vector<int64_t>& kinds, const std::vector<int64_t>& slots,
              const std::vector<int64_t>& sizes, int64_t nslots) {
    std::vector<void*> live(nslots, nullptr);
    auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < kinds.size(); ++i) {
        if (kinds[i] == 0) {
            live[slots[i]] = c10::cuda::CUDACachingAllocator::raw_alloc(sizes[i]);
        } else if (live[slots[i]] != nullptr) {
            c10::cuda::CUDACachingAllocator::raw_delete(live[slots[i]]);
            live[slots[i]] = nullptr;
        }
    }
    auto elapsed = std::chrono::steady_clock::now() - start;
    for (void* p : live) {
        if (p != nullptr) c10::cuda::CUDACachingAllocator::raw_delete(p);
    }
    c10::cuda::CUDACachingAllocator::emptyCache();
    return std::chrono::duration<double>(elapsed).count();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("replay", &replay); }
"""


def read_trace(path, scale):
    """The trace as parallel lists, with ids mapped to slots reused after their free."""
    kinds, slots, sizes = [], [], []
    slot_of, free_slots, next_slot = {}, [], 0
    with open(path) as f:
        for line in f:
            parts = line.strip().lstrip("\ufeff").split(",")
            if len(parts) < 3 or parts[0] not in ("alloc", "free"):
                continue
            action, ident = parts[0], parts[1]
            if action == "alloc":
                size = int(parts[2])
                if size == 0:
                    continue
                if free_slots:
                    slot = free_slots.pop()
                else:
                    slot, next_slot = next_slot, next_slot + 1
                slot_of[ident] = slot
                kinds.append(0)
                slots.append(slot)
                sizes.append(max(1, -(-size // scale)))
            elif ident in slot_of:
                slot = slot_of.pop(ident)
                free_slots.append(slot)
                kinds.append(1)
                slots.append(slot)
                sizes.append(0)
    return kinds, slots, sizes, next_slot


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", type=int, default=1)
    args = parser.parse_args()
    import torch
    from torch.utils.cpp_extension import load_inline

    module = load_inline(
        name="wgpool_torch_alloc_speed",
        cpp_sources=CPP,
        with_cuda=True,
        verbose=False,
        extra_cflags=["-O2"],
    )
    kinds, slots, sizes, nslots = read_trace(args.trace, max(1, args.scale))
    torch.cuda.init()
    runs = [module.replay(kinds, slots, sizes, nslots) for _ in range(max(1, args.repeat))]
    ops = len(kinds)
    rest = statistics.median(runs[1:]) if len(runs) > 1 else None
    print(
        json.dumps(
            {
                "trace": os.path.basename(args.trace),
                "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                "ops": ops,
                "scale": args.scale,
                "runs": runs,
                "first_s": runs[0],
                "rest_median_s": rest,
                "ns_per_op_first": runs[0] * 1e9 / ops,
                "ns_per_op_rest_median": rest * 1e9 / ops if rest is not None else None,
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(0),
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
