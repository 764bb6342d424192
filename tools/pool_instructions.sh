#!/usr/bin/env bash
# Instructions per operation of the GPU pool's replay against the engine alone on the same
# trace, counted by callgrind: what the pool adds in code, apart from what it adds in time
# (atomics, cache misses, the driver's threads), which wall time mixes in.
#
# Usage: tools/pool_instructions.sh BINARY TRACE MODE [SCALE]
#   MODE: True (pages) or False (fixed segments), for expandable_segments; SCALE default 16.
#
# The pool: `BINARY replay TRACE --gpu --scale SCALE --repeat N --keep-cache --json` under
# callgrind, counting inside `gpu_replay::replay_on_gpu`, once with N=1 and once with N=3;
# the difference, over two runs, is what one run with the cache kept costs (runs 2-3: the
# runs `rest_median` times), every allocation and every free included, whatever the
# compiler inlined. Setting up and the first (cold) run count the same in both and cancel;
# the engine-alone replay the command makes (whose number of timed runs varies) and
# `PagedMemory::alias_buffer` (making wgpu wrappers, timed as driver time) are taken out of
# both.
#
# The engine: the same command's engine-alone replay, counted inside its timed runs
# (`trace::replay::run_once`, over the number of times `trace::replay::replay` called it).
#
# (Before 2026-12-06's thirteenth session this counted inside `gpu_replay::replay_once*`
# over three runs. With `replay_once` inlined into its caller only the allocating closure
# matched, so frees that parked in the reuse cache went uncounted: it read 1.26x on the
# decode in pages mode where this reads 1.42x.)
set -euo pipefail
binary=$1
trace=$2
mode=$3
scale=${4:-16}
args=(replay "$trace" --gpu --scale "$scale" --keep-cache --json
    --conf "expandable_segments:$mode")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for runs in 1 3; do
    valgrind --tool=callgrind --callgrind-out-file="$dir/pool$runs.out" \
        --toggle-collect='*gpu_replay::replay_on_gpu*' "$binary" "${args[@]}" --repeat $runs \
        > "$dir/report$runs.json" 2> /dev/null
done
valgrind --tool=callgrind --callgrind-out-file="$dir/engine.out" \
    --toggle-collect='*trace::replay::run_once*' "$binary" "${args[@]}" --repeat 1 \
    > /dev/null 2>&1
python3 - "$dir" "$trace" "$mode" <<'EOF'
import json, re, subprocess, sys
folder, trace, mode = sys.argv[1:4]
ops = json.load(open(f"{folder}/report1.json"))["ops"]

def annotate(name, *flags):
    return subprocess.run(["callgrind_annotate", *flags, f"{folder}/{name}"],
                          capture_output=True, text=True, check=True).stdout

def total(name):
    return int(re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", annotate(name)).group(1).replace(",", ""))

def aliases(name):
    found = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*PagedMemory::alias_buffer \[",
                      annotate(name, "--inclusive=yes"), re.M)
    return int(found.group(1).replace(",", "")) if found else 0

def engine_alone(name):
    # The command's engine-alone replay (`engine_ns_per_op`) runs inside `replay_on_gpu` too,
    # and times as many runs as fit its 200 ms: under callgrind that count differs between the
    # two commands (7 against 8 seen), one run being about 720 instructions per operation.
    found = re.findall(r"^\s*([\d,]+) \([^)]*\)\s+\S*trace::replay::replay \[",
                       annotate(name, "--inclusive=yes"), re.M)
    return max((int(n.replace(",", "")) for n in found), default=0)

steady = [total(f"pool{n}.out") - aliases(f"pool{n}.out") - engine_alone(f"pool{n}.out")
          for n in (1, 3)]
calls = sum(int(n) for n in re.findall(r"< \S*trace::replay::replay \((\d+)x\)",
                                        annotate("engine.out", "--tree=caller")))
pool = (steady[1] - steady[0]) / 2 / ops
engine = total("engine.out") / max(calls, 1) / ops
print(f"{trace} expandable_segments:{mode}: pool {pool:.0f} instr/op (runs with the cache "
      f"kept), engine {engine:.0f} instr/op ({calls} runs), pool over engine {pool / engine:.2f}")
EOF
