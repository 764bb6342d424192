#!/usr/bin/env python3
"""Checks `wgpool replay` against every PyTorch oracle pair in an oracle directory.

    python3 tools/oracle/check_all.py [ORACLE_DIR] [--wgpool BIN] [--only SUBSTRING] [--plain]

ORACLE_DIR (default /work/oracle) holds traces/<trace>.csv and results/<trace>.<config>.{csv,json}
as tools/oracle/run_h200.py writes them. For every pair it runs

    wgpool replay results/<trace>.<config>.csv --oracle --stats --json --conf <conf>
          [--device-memory-bytes DEVICE_TOTAL_BYTES]

and prints, per pair, the oracle's divergences, the memory_stats keys that differ from
PyTorch's `torch.cuda.memory_stats()`, and a plain replay of the original trace (no --oracle:
segments at the addresses wgpool's model of the CUDA driver gives them) against PyTorch: peak
reserved, segments, retries, OOMs and the memory_stats keys that differ. --plain runs only the
plain replay. The exit status is 1 when any pair differs.
"""

import json
import os
import subprocess
import sys

# config name -> wgpool --conf, as tools/oracle/run_h200.py's CONFIGS set PYTORCH_CUDA_ALLOC_CONF.
CONFS = {
    "default": "",
    "mss128": "max_split_size_mb:128",
    "rp4": "roundup_power2_divisions:4",
    "rplist": "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "gc_cap": "garbage_collection_threshold:0.8",
    "cap": "",
    "mixed_cap": "max_split_size_mb:64,roundup_power2_divisions:8,garbage_collection_threshold:0.6",
    "expandable": "expandable_segments:True",
    "expandable_cap": "expandable_segments:True",
}


def wgpool_conf(name, result):
    parts = ["policy:pytorch"]
    if CONFS[name]:
        parts.append(CONFS[name])
    if result.get("memory_fraction") is not None:
        parts.append("per_process_memory_fraction:" + repr(result["memory_fraction"]))
    return ",".join(parts)


def run(binary, path, conf, device_bytes, extra):
    argv = [binary, "replay", path, "--json", "--conf", conf] + extra
    if device_bytes is not None:
        argv += ["--device-memory-bytes", str(device_bytes)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr.strip()
    return json.loads(done.stdout), None


def parse_args(args):
    """(wgpool binary, --only substring or None, positional arguments) of the oracle tools."""
    binary = "target/release/wgpool"
    only = None
    if "--wgpool" in args:
        binary = args[args.index("--wgpool") + 1]
    if "--only" in args:
        only = args[args.index("--only") + 1]
    positional = [a for i, a in enumerate(args)
                  if not a.startswith("--") and (i == 0 or args[i - 1] not in ("--wgpool", "--only"))]
    return binary, only, positional


def main():
    args = sys.argv[1:]
    plain_only = "--plain" in args
    binary, only, positional = parse_args(args)
    root = positional[0] if positional else "/work/oracle"
    results = os.path.join(root, "results")
    names = sorted(f[:-5] for f in os.listdir(results) if f.endswith(".json"))
    failures = 0
    for name in names:
        if only and only not in name:
            continue
        trace, config = name.rsplit(".", 1)
        result = json.load(open(os.path.join(results, name + ".json")))
        torch_stats = result["memory_stats"]
        conf = wgpool_conf(config, result)
        # The device the pair was recorded on: caps are fractions of it, and PyTorch sizes
        # each expandable segment's reserved range from it.
        device_mb = result.get("device_total_bytes")
        torch_peak = torch_stats["reserved_bytes.all.peak"]
        plain, err = run(binary, os.path.join(root, "traces", trace + ".csv"), conf, device_mb,
                         ["--stats"])
        if plain is None:
            print(f"{name:40} plain replay failed: {err}")
            failures += 1
            continue
        ours = plain["peak_reserved_bytes"]
        delta = (ours - torch_peak) / torch_peak * 100
        line = (f"{name:40} peak {ours:>14,} vs {torch_peak:>14,} ({delta:+.3f}%)"
                f" segs {plain['segments_created']}/{torch_stats['num_device_alloc']}"
                f" retries {plain['num_alloc_retries']}/{torch_stats['num_alloc_retries']}"
                f" ooms {plain['num_ooms']}/{torch_stats['num_ooms']}")
        plain_differing = sorted(k for k in torch_stats
                                 if plain["memory_stats"].get(k) != torch_stats[k])
        line += f" plain stats {len(plain_differing)} keys differ"
        bad = ours != torch_peak or bool(plain_differing)
        if not plain_only:
            oracle, err = run(binary, os.path.join(results, name + ".csv"), conf, device_mb,
                              ["--oracle", "--stats"])
            if oracle is None:
                line += f" | oracle failed: {err}"
                bad = True
            else:
                o = oracle["oracle"]
                ms = oracle["memory_stats"]
                differing = sorted(k for k in torch_stats if ms.get(k) != torch_stats[k])
                extra = sorted(k for k in ms if k not in torch_stats)
                line += (f" | oracle {o['divergences']} div of {o['checked']}"
                         f" | stats {len(differing)} keys differ")
                if o["divergences"]:
                    line += f" (first at line {o['first_divergence_line']})"
                if differing:
                    line += " " + ",".join(differing[:4])
                if extra:
                    line += f" extra keys {extra}"
                bad = bad or o["divergences"] > 0 or bool(differing) or bool(extra)
        failures += bad
        print(line, flush=True)
    print(f"{failures} pair(s) differ")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
