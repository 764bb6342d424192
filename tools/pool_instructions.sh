#!/usr/bin/env bash
# Instructions per operation of the GPU pool's replay against the engine alone on the same
# trace, counted by callgrind: what the pool adds in code, apart from what it adds in time
# (atomics, cache misses, the driver's threads), which wall time mixes in.
#
# Usage: tools/pool_instructions.sh BINARY TRACE MODE [SCALE]
#   MODE: True (pages) or False (fixed segments), for expandable_segments; SCALE default 16.
#
# Runs `BINARY replay TRACE --gpu --scale SCALE --repeat 3 --keep-cache --json` twice under
# callgrind: once counting inside `gpu_replay::replay_once` (the pool's three runs, the cold
# first one included, so an upper bound), once inside `trace::replay::run_once` (the
# engine-alone baseline the same command times). `PagedMemory::alias_buffer` (making wgpu
# wrappers, timed as driver time) is left out of the pool's count. Prints both per operation
# and their ratio. Needs a GPU adapter (lavapipe: WGPU_BACKEND=vulkan).
set -euo pipefail
binary=$1
trace=$2
mode=$3
scale=${4:-16}
args=(replay "$trace" --gpu --scale "$scale" --repeat 3 --keep-cache --json
    --conf "expandable_segments:$mode")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$dir/pool.out" \
    --toggle-collect='*gpu_replay::replay_once*' "$binary" "${args[@]}" > "$dir/report.json" 2> /dev/null
valgrind --tool=callgrind --callgrind-out-file="$dir/engine.out" \
    --toggle-collect='*trace::replay::run_once*' "$binary" "${args[@]}" > /dev/null 2>&1
python3 - "$dir" "$trace" "$mode" <<'PY'
import json, re, subprocess, sys
folder, trace, mode = sys.argv[1:4]
ops = json.load(open(f"{folder}/report.json"))["ops"]

def annotate(name, *flags):
    return subprocess.run(["callgrind_annotate", *flags, f"{folder}/{name}"],
                          capture_output=True, text=True, check=True).stdout

def total(name):
    return int(re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", annotate(name)).group(1).replace(",", ""))

aliases = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*PagedMemory::alias_buffer \[",
                    annotate("pool.out", "--inclusive=yes"), re.M)
aliases = int(aliases.group(1).replace(",", "")) if aliases else 0
runs = sum(int(n) for n in re.findall(r"< \S*trace::replay::replay \((\d+)x\)",
                                       annotate("engine.out", "--tree=caller")))
pool = (total("pool.out") - aliases) / 3 / ops
engine = total("engine.out") / max(runs, 1) / ops
print(f"{trace} expandable_segments:{mode}: pool {pool:.0f} instr/op, engine {engine:.0f} "
      f"instr/op ({runs} runs), pool over engine {pool / engine:.2f}")
PY
