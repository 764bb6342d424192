#!/usr/bin/env python3
"""Writes tests/data/torch-snapshot-small.pickle: a small memory snapshot in the layout of
PyTorch's torch.cuda.memory._dump_snapshot(), made with Python's own pickle module, so that
the reader's tests need neither PyTorch nor a GPU.

The layout follows PyTorch's sources (torch/csrc/cuda/memory_snapshot.cpp and
c10/cuda/CUDACachingAllocator.cpp): a dict with `segments` (each with its `blocks` and their
`state`), `device_traces` (one list of events per device: `action`, `addr`, `size`, `stream`,
`time_us`, `frames`; an `oom` has `device_free` instead of `addr`) and `allocator_settings`.
An `alloc` and its `free_completed` carry the size the caller asked for.

The story (device 0, stream 0 unless said otherwise):
  - a 1 MiB block at S0 was allocated before recording began and is freed at event 2;
  - a 3000-byte block at S1 was allocated before recording and is still live at the dump;
  - event 0..: a 2 MiB segment S0 exists; 1000 B at S0+1 MiB, freed later;
  - a 5 MiB allocation on another stream in a new 20 MiB segment, still live;
  - an OOM of 80 GiB.
Run it from the repository root: python3 tools/make_test_snapshot.py
"""
import pickle
import sys

MiB = 1 << 20
S0 = 0x7F0000000000          # small segment (2 MiB)
S1 = 0x7F0000200000          # large segment (20 MiB) holding the pre-existing 3000 B block
S2 = 0x7F0001600000          # large segment (20 MiB) made during the trace
STREAM1 = 0x55D0C0FFEE00     # a side stream's handle

frames = [
    {"filename": "train.py", "line": 12, "name": "forward"},
    {"filename": "torch/nn/modules/linear.py", "line": 125, "name": "forward"},
]


def event(action, addr, size, stream=0, t=0):
    e = {"action": action, "size": size, "stream": stream, "time_us": t, "frames": frames}
    if action == "oom":
        e["device_free"] = addr
    else:
        e["addr"] = addr
    return e


traces = [
    event("alloc", S0 + MiB, 1000, t=100),
    event("free_requested", S0, MiB, t=110),
    event("free_completed", S0, MiB, t=111),
    event("segment_alloc", S2, 20 * MiB, STREAM1, t=120),
    event("alloc", S2, 5 * MiB, STREAM1, t=121),
    event("free_requested", S0 + MiB, 1000, t=130),
    event("free_completed", S0 + MiB, 1000, t=131),
    event("oom", 1 << 30, 80 << 30, t=140),
    event("snapshot", 0, 0, t=150),
]

segments = [
    {
        "device": 0, "address": S0, "total_size": 2 * MiB, "allocated_size": 0,
        "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "small",
        "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames,
        "blocks": [{"address": S0, "size": 2 * MiB, "requested_size": 0,
                    "state": "inactive", "frames": []}],
    },
    {
        "device": 0, "address": S1, "total_size": 20 * MiB, "allocated_size": 3072,
        "active_size": 3072, "requested_size": 3000, "stream": 0, "segment_type": "large",
        "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames,
        "blocks": [
            {"address": S1, "size": 3072, "requested_size": 3000,
             "state": "active_allocated", "frames": frames},
            {"address": S1 + 3072, "size": 20 * MiB - 3072, "requested_size": 0,
             "state": "inactive", "frames": []},
        ],
    },
    {
        "device": 0, "address": S2, "total_size": 20 * MiB, "allocated_size": 5 * MiB,
        "active_size": 5 * MiB, "requested_size": 5 * MiB, "stream": STREAM1,
        "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
        "frames": frames,
        "blocks": [
            {"address": S2, "size": 5 * MiB, "requested_size": 5 * MiB,
             "state": "active_allocated", "frames": frames},
            {"address": S2 + 5 * MiB, "size": 15 * MiB, "requested_size": 0,
             "state": "inactive", "frames": []},
        ],
    },
]

snapshot = {
    "segments": segments,
    "device_traces": [traces, []],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                           "expandable_segments": False,
                           "roundup_power2_divisions": {"1": 0, "2": 0}},
}

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/torch-snapshot-small.pickle"
with open(out, "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
print(out)
