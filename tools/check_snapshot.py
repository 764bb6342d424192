#!/usr/bin/env python3
"""Checks that a memory snapshot pickle written by `wgpool replay --snapshot` (or by
PyTorch) has the layout PyTorch's memory visualizer reads.

    python3 tools/check_snapshot.py FILE.pickle [--require-torch] [--html-dir DIR]

Always (Python's own pickle module, no PyTorch needed):
  - the keys and types that torch/cuda/_memory_viz.py and torch/utils/viz/MemoryViz.js read;
  - each segment's blocks tile it exactly (the assertion in _memory_viz.segsum);
  - MemoryViz.js's `simulate_memory`, replayed backwards from the final state: at every
    event, every live block lies inside a live segment (the viewer fails otherwise).
With PyTorch installed (or required with --require-torch), it also runs
torch.cuda._memory_viz: segsum, trace, segments/memory (with a stand-in flamegraph script),
trace_plot, trace_plot(plot_segments=True) and segment_plot, and writes the HTML pages to
--html-dir if given. Prints one line per check; exits 1 on the first failure.
"""
import argparse
import pickle
import sys

INT = int
STATES = {"active_allocated", "active_pending_free", "inactive"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot"}


def fail(message):
    print(f"FAIL {message}")
    sys.exit(1)


def ok(message):
    print(f"ok   {message}")


def need(cond, message):
    if not cond:
        fail(message)


def check_keys(where, d, keys):
    need(isinstance(d, dict), f"{where} is a dict")
    for key, kind in keys.items():
        need(key in d, f"{where} has `{key}`")
        need(isinstance(d[key], kind), f"{where}[{key!r}] is {kind}, got {type(d[key])}")


def check_structure(data):
    check_keys("snapshot", data, {"segments": list, "device_traces": list})
    for i, seg in enumerate(data["segments"]):
        where = f"segments[{i}]"
        check_keys(where, seg, {"device": INT, "address": INT, "total_size": INT,
                                "allocated_size": INT, "active_size": INT,
                                "requested_size": INT, "stream": INT, "segment_type": str,
                                "blocks": list, "frames": list})
        need(seg["segment_type"] in ("small", "large"), f"{where} segment_type")
        addr = seg["address"]
        for j, b in enumerate(seg["blocks"]):
            bw = f"{where}.blocks[{j}]"
            check_keys(bw, b, {"size": INT, "requested_size": INT, "state": str, "frames": list})
            need(b["state"] in STATES, f"{bw} state {b['state']!r}")
            if "address" in b:
                need(b["address"] == addr, f"{bw} address follows the previous block")
            if b["state"] == "active_allocated":
                need(b["requested_size"] <= b["size"], f"{bw} requested_size <= size")
            addr += b["size"]
        need(addr == seg["address"] + seg["total_size"], f"{where} blocks tile the segment")
        allocated = sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
        need(seg["allocated_size"] == allocated, f"{where} allocated_size is its blocks' sum")
    for d, events in enumerate(data["device_traces"]):
        need(isinstance(events, list), f"device_traces[{d}] is a list")
        for i, e in enumerate(events):
            where = f"device_traces[{d}][{i}]"
            # `frames` is optional: PyTorch leaves it out of events without a stack.
            check_keys(where, e, {"action": str, "size": INT, "stream": INT, "time_us": INT})
            need(isinstance(e.get("frames", []), list), f"{where} frames is a list")
            need(e["action"] in ACTIONS, f"{where} action {e['action']!r}")
            key = "device_free" if e["action"] == "oom" else "addr"
            need(isinstance(e.get(key), INT), f"{where} has int `{key}`")
    ok(f"structure: {len(data['segments'])} segments, "
       f"{sum(len(t) for t in data['device_traces'])} events")


def simulate(data, device=0):
    """MemoryViz.js's simulate_memory, checked at every event (backwards from the end): a
    block appears only inside live memory (a segment, or mapped pages of an expandable one),
    and memory disappears only when no live block lies in it."""
    regions = []    # [start, end) of live memory
    blocks = {}     # address -> size

    def add(start, end):
        regions.append((start, end))
        regions.sort()
        merged = []
        for a, b in regions:
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        regions[:] = merged

    def covered(addr):
        return any(a <= addr < b for a, b in regions)

    def remove(start, size, where):
        end = start + size
        for addr, n in blocks.items():
            need(not (start <= addr < end), f"{where}: block {addr:#x} lives in memory "
                 "that does not exist before this event")
        for i, (a, b) in enumerate(regions):
            if a <= start and end <= b:
                regions[i:i + 1] = [r for r in ((a, start), (end, b)) if r[0] < r[1]]
                return
        fail(f"{where}: memory [{start:#x}, {end:#x}) is live after this event")

    for s in data["segments"]:
        if s["device"] != device:
            continue
        add(s["address"], s["address"] + s["total_size"])
        addr = s["address"]
        for b in s["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                blocks[addr] = b["size"]
            addr += b["size"]

    events = data["device_traces"][device] if device < len(data["device_traces"]) else []
    for i in range(len(events) - 1, -1, -1):
        e = events[i]
        a = e["action"]
        where = f"device_traces[{device}][{i}]"
        if a == "alloc":
            need(e["addr"] in blocks, f"{where}: the allocated block is live after it")
            del blocks[e["addr"]]
        elif a == "free_completed":
            need(e["addr"] not in blocks, f"{where}: the freed block is not live after it")
            need(covered(e["addr"]), f"{where}: block {e['addr']:#x} lies in live memory")
            blocks[e["addr"]] = e["size"]
        elif a in ("segment_free", "segment_unmap"):
            add(e["addr"], e["addr"] + e["size"])
        elif a in ("segment_alloc", "segment_map"):
            remove(e["addr"], e["size"], where)
    ok(f"MemoryViz simulation: {len(events)} events of device {device} replayed backwards")


def run_torch(data, html_dir):
    from torch.cuda import _memory_viz as viz
    print("\n".join(l for l in viz.segsum(data).splitlines() if l.startswith("total_")))
    ok("_memory_viz.segsum")
    text = viz.trace(data)
    ok(f"_memory_viz.trace ({len(text.splitlines())} lines)")
    viz.segments(data, format_flamegraph=lambda lines: lines)
    viz.memory(data, format_flamegraph=lambda lines: lines)
    ok("_memory_viz.segments and memory (flamegraph input)")
    pages = {
        "trace_plot.html": viz.trace_plot(data),
        "trace_plot_segments.html": viz.trace_plot(data, plot_segments=True),
        "segment_plot.html": viz.segment_plot(data),
    }
    for name, html in pages.items():
        need("add_local_files" in html and len(html) > 1000, f"{name} is a viewer page")
        if html_dir:
            with open(f"{html_dir}/{name}", "w") as f:
                f.write(html)
    ok("_memory_viz.trace_plot, trace_plot(plot_segments=True), segment_plot"
       + (f" (written to {html_dir})" if html_dir else ""))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--require-torch", action="store_true")
    parser.add_argument("--html-dir")
    args = parser.parse_args()
    with open(args.file, "rb") as f:
        data = pickle.load(f)
    check_structure(data)
    simulate(data)
    try:
        import torch  # noqa: F401
    except ImportError:
        need(not args.require_torch, "PyTorch is installed (--require-torch)")
        print("skip torch.cuda._memory_viz: PyTorch is not installed here")
        return
    print(f"torch {torch.__version__}")
    run_torch(data, args.html_dir)


if __name__ == "__main__":
    main()
