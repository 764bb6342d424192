#!/usr/bin/env python3
"""Builds the oracle set on a CUDA machine: records the workloads, writes the random mixes,
then replays every trace through PyTorch's allocator under every configuration below, a fresh
process each, several at a time within a device-memory budget.

    python3 tools/oracle/run_h200.py OUT_DIR [EXTRA_TRACE.csv ...]
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (PYTORCH_CUDA_ALLOC_CONF, cap factor over the trace's peak live bytes or None)
CONFIGS = {
    "default": ("", None),
    "mss128": ("max_split_size_mb:128", None),
    "rp4": ("roundup_power2_divisions:4", None),
    "rplist": ("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", None),
    "gc_cap": ("garbage_collection_threshold:0.8", 1.15),
    "cap": ("", 1.0),
    "mixed_cap": ("max_split_size_mb:64,roundup_power2_divisions:8,garbage_collection_threshold:0.6", 1.2),
    "expandable": ("expandable_segments:True", None),
    "expandable_cap": ("expandable_segments:True", 1.02),
}
WORKLOADS = ["resnet50_bs_cycle", "bert_varlen", "vit_bf16", "convnext_multiscale",
             "gpt2_serving", "decode_kv", "mlp_small"]
BUDGET = 110 << 30


def peak_live(path):
    live, peak, sizes = 0, 0, {}
    with open(path) as f:
        f.readline()
        for line in f:
            action, ident, size, _ = line.strip().split(",")
            if action == "alloc":
                sizes[ident] = int(size)
                live += int(size)
                peak = max(peak, live)
            elif action == "free":
                live -= sizes.pop(ident, 0)
    return peak


def run_limited(jobs, budget):
    """jobs: (weight, argv, env, log). Runs them with the summed weight under budget."""
    pending = sorted(jobs, key=lambda j: -j[0])
    running = []
    while pending or running:
        used = sum(w for w, _ in running)
        for job in list(pending):
            if not running or used + job[0] <= budget:
                weight, argv, env, log = job
                proc = subprocess.Popen(argv, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
                running.append((weight, proc))
                pending.remove(job)
                used += weight
        time.sleep(0.2)
        running = [(w, p) for w, p in running if p.poll() is None]


def main():
    out = sys.argv[1]
    traces_dir = os.path.join(out, "traces")
    oracle_dir = os.path.join(out, "oracle")
    os.makedirs(traces_dir, exist_ok=True)
    os.makedirs(oracle_dir, exist_ok=True)
    t0 = time.time()
    record = [
        (12 << 30,
         [sys.executable, os.path.join(HERE, "record_workloads.py"), traces_dir, w]
         + (["--snapshot"] if w == "mlp_small" else []),
         dict(os.environ), os.path.join(traces_dir, w + ".log"))
        for w in WORKLOADS
    ]
    run_limited(record, BUDGET)
    print(f"recorded in {time.time() - t0:.0f} s", flush=True)
    subprocess.run([sys.executable, os.path.join(HERE, "random_traces.py"), traces_dir], check=True)
    for extra in sys.argv[2:]:
        subprocess.run(["cp", extra, traces_dir], check=True)
    traces = sorted(f for f in os.listdir(traces_dir) if f.endswith(".csv"))
    jobs = []
    for trace in traces:
        path = os.path.join(traces_dir, trace)
        weight = int(1.6 * peak_live(path)) + (1 << 30)
        for name, (conf, cap) in CONFIGS.items():
            env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
            prefix = os.path.join(oracle_dir, trace[:-4] + "." + name)
            argv = [sys.executable, os.path.join(HERE, "replay_torch.py"), path, prefix]
            if cap is not None:
                argv += ["--cap-factor", str(cap)]
            jobs.append((weight, argv, env, prefix + ".log"))
    t1 = time.time()
    run_limited(jobs, BUDGET)
    print(f"replayed {len(jobs)} in {time.time() - t1:.0f} s", flush=True)
    summary = {}
    for f in sorted(os.listdir(oracle_dir)):
        if f.endswith(".json"):
            r = json.load(open(os.path.join(oracle_dir, f)))
            s = r["memory_stats"]
            summary[f[:-5]] = [s["reserved_bytes.all.peak"], r["peak_live_bytes"],
                               s["num_device_alloc"], s["num_ooms"], s["num_alloc_retries"]]
        elif f.endswith(".log") and "Error" in open(os.path.join(oracle_dir, f)).read():
            print("FAILED", f, open(os.path.join(oracle_dir, f)).read()[-2000:])
    for f in sorted(os.listdir(traces_dir)):
        if f.endswith(".log") and "Error" in open(os.path.join(traces_dir, f)).read():
            print("FAILED", f, open(os.path.join(traces_dir, f)).read()[-3000:])
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=0)
    for k, v in summary.items():
        print(k, v)


if __name__ == "__main__":
    main()
