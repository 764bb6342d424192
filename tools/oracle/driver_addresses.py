#!/usr/bin/env python3
"""Extracts, per oracle pair, the CUDA driver's address choices: every cudaMalloc with its size
and the address it returned, every cudaFree, and every stream creation, in the process's order.

    python3 tools/oracle/driver_addresses.py [ORACLE_DIR] OUT_DIR [--wgpool BIN] [--only SUBSTRING]

For each native pair (not the expandable ones) it replays results/<pair>.csv with
`wgpool replay --oracle --snapshot`: with zero divergences, the engine creates and releases
exactly PyTorch's segments, in PyTorch's order. A segment created at trace row i was
cudaMalloc'd for that row's allocation, which PyTorch placed at the segment's base, so the
row's id is the driver's address; a released segment was cudaFree'd. Streams are created just
before the first row that uses them (tools/oracle/replay_torch.py), the first one excepted.
The final segments are checked against the ones PyTorch listed.

Writes OUT_DIR/<pair>.csv with the header `event,size,address` and rows `malloc,SIZE,ADDRESS`,
`free,SIZE,ADDRESS` and `stream,,` (tests/data/cuda_addresses holds three of them).
"""

import json
import os
import pickle
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_all import parse_args, wgpool_conf  # noqa: E402

NATIVE = {"default", "mss128", "rp4", "rplist", "gc_cap", "cap", "mixed_cap"}


def sequence(binary, results, name):
    config = name.rsplit(".", 1)[1]
    result = json.load(open(os.path.join(results, name + ".json")))
    rows = [line.strip().split(",") for line in open(os.path.join(results, name + ".csv"))][1:]
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = os.path.join(tmp, "replay.pickle")
        argv = [binary, "replay", os.path.join(results, name + ".csv"), "--oracle", "--json",
                "--conf", wgpool_conf(config, result), "--snapshot", snapshot,
                "--history-entries", str(8 * len(rows) + 64)]
        if result.get("memory_fraction") is not None:
            argv += ["--device-memory-bytes", str(result["device_total_bytes"])]
        report = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        if report["oracle"]["divergences"]:
            raise SystemExit(f"{name}: the oracle diverges; the segments are not PyTorch's")
        events = pickle.load(open(snapshot, "rb"))["device_traces"][0]
    # The snapshot numbers segments its own way: map them to PyTorch's addresses.
    driver_address = {}
    first_use = {}
    for i, row in enumerate(rows):
        first_use.setdefault(row[3], i)
    stream_rows = sorted(first_use.values())[1:]
    out = ["event,size,address"]
    live = {}
    for event in events:
        if event["action"] == "segment_alloc":
            i = event["time_us"]
            while stream_rows and stream_rows[0] <= i:
                out.append("stream,,")
                stream_rows.pop(0)
            action, address, _, _ = rows[i]
            assert action == "alloc", (name, i, rows[i])
            driver_address[event["addr"]] = int(address)
            live[int(address)] = event["size"]
            out.append(f"malloc,{event['size']},{address}")
        elif event["action"] == "segment_free":
            address = driver_address.pop(event["addr"])
            del live[address]
            out.append(f"free,{event['size']},{address}")
    final = {s["address"]: s["total_size"] for s in result["segments"]}
    if live != final:
        raise SystemExit(f"{name}: {len(live)} segments left, PyTorch listed {len(final)}")
    return out


def main():
    binary, only, positional = parse_args(sys.argv[1:])
    root, out_dir = (positional if len(positional) == 2 else ["/work/oracle"] + positional)
    results = os.path.join(root, "results")
    os.makedirs(out_dir, exist_ok=True)
    for name in sorted(f[:-5] for f in os.listdir(results) if f.endswith(".json")):
        if name.rsplit(".", 1)[1] not in NATIVE or (only and only not in name):
            continue
        lines = sequence(binary, results, name)
        with open(os.path.join(out_dir, name + ".csv"), "w") as f:
            f.write("\n".join(lines) + "\n")
        mallocs = sum(line.startswith("malloc") for line in lines)
        frees = sum(line.startswith("free") for line in lines)
        print(f"{name:40} {mallocs} cudaMalloc, {frees} cudaFree", flush=True)


if __name__ == "__main__":
    main()
