#!/usr/bin/env python3
"""Replays a trace through PyTorch's own CUDA caching allocator and writes an oracle.

    PYTORCH_CUDA_ALLOC_CONF=... python3 replay_torch.py TRACE.csv OUT_PREFIX [--cap-factor F]

Every `alloc` row goes to `torch.cuda.caching_allocator_alloc(size, 0, stream)` and every
`free` row to `caching_allocator_delete`, in file order, in a process that allocates nothing
else on the device. Writes:

- OUT_PREFIX.csv: the same trace with each id replaced by the address PyTorch handed out (so
  the file checks every placement), and `oom,0,SIZE,STREAM` where PyTorch refused an
  allocation (that id's later free is dropped);
- OUT_PREFIX.json: the configuration, the cap in bytes (with --cap-factor F, the cap is F times
  the trace's peak of live requested bytes, set through
  `torch.cuda.set_per_process_memory_fraction`), `torch.cuda.memory_stats()` after the last
  row, and the segments of `torch.cuda.memory._snapshot()` at the end.

Rows of size 0 are skipped: PyTorch serves them without touching the allocator.
"""

import json
import os
import sys
import time

import torch


def read_trace(path):
    rows = []
    with open(path) as f:
        header = f.readline().strip()
        assert header == "action,id,size,stream", header
        for line in f:
            action, ident, size, stream = line.strip().split(",")
            rows.append((action, int(ident), int(size), int(stream)))
    return rows


def peak_live(rows):
    live, peak, sizes = 0, 0, {}
    for action, ident, size, _ in rows:
        if action == "alloc":
            sizes[ident] = size
            live += size
            peak = max(peak, live)
        elif action == "free":
            live -= sizes.pop(ident)
    return peak


def main():
    trace, prefix = sys.argv[1], sys.argv[2]
    cap_factor = None
    if "--cap-factor" in sys.argv:
        cap_factor = float(sys.argv[sys.argv.index("--cap-factor") + 1])
    rows = read_trace(trace)
    torch.cuda.init()
    device_free, device_total = torch.cuda.mem_get_info(0)
    cap = None
    fraction = None
    if cap_factor is not None:
        target = int(cap_factor * peak_live(rows))
        fraction = target / device_total
        torch.cuda.set_per_process_memory_fraction(fraction, 0)
        # PyTorch's own arithmetic: allowed = size_t(fraction * double(total)).
        cap = int(fraction * float(device_total))
    streams = {0: torch.cuda.default_stream(0)}
    live = {}
    out_rows = []
    ooms = 0
    start = time.time()
    for action, ident, size, stream in rows:
        if size == 0:
            continue
        if stream not in streams:
            streams[stream] = torch.cuda.Stream(0)
        if action == "alloc":
            try:
                addr = torch.cuda.caching_allocator_alloc(size, 0, streams[stream])
            except torch.OutOfMemoryError:
                ooms += 1
                out_rows.append(f"oom,0,{size},{stream}")
                continue
            live[ident] = addr
            out_rows.append(f"alloc,{addr},{size},{stream}")
        else:
            addr = live.pop(ident, None)
            if addr is None:
                continue  # its allocation was refused
            torch.cuda.caching_allocator_delete(addr)
            out_rows.append(f"free,{addr},{size},{stream}")
    seconds = time.time() - start
    stats = torch.cuda.memory_stats(0)
    snapshot = torch.cuda.memory._snapshot()
    segments = [
        {
            "address": s["address"],
            "total_size": s["total_size"],
            "stream": s["stream"],
            "segment_type": s["segment_type"],
            "blocks": [(b["size"], b["state"]) for b in s["blocks"]],
        }
        for s in snapshot["segments"]
    ]
    with open(prefix + ".csv", "w") as f:
        f.write("action,id,size,stream\n")
        f.write("\n".join(out_rows))
        f.write("\n")
    result = {
        "trace": os.path.basename(trace),
        "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "device_total_bytes": device_total,
        "cap_factor": cap_factor,
        "memory_fraction": fraction,
        "cap_bytes": cap,
        "peak_live_bytes": peak_live(rows),
        "ooms_seen": ooms,
        "seconds": seconds,
        "memory_stats": stats,
        "segments": segments,
    }
    with open(prefix + ".json", "w") as f:
        json.dump(result, f)
    print(
        f"{os.path.basename(prefix)}: peak reserved {stats['reserved_bytes.all.peak']}"
        f" segments {stats['num_device_alloc']} ooms {stats['num_ooms']}"
        f" retries {stats['num_alloc_retries']} ({seconds:.1f} s)"
    )


if __name__ == "__main__":
    main()
