#!/usr/bin/env bash
# Instructions per operation of the placement engine on one trace, counted by callgrind: the
# most repeatable measure of engine cost on a shared machine (and the only one where the VM
# exposes no hardware counters to `perf stat`).
#
# Usage: tools/engine_instructions.sh BINARY TRACE [CONF]
#
# Counts only inside `run_once` (the replay's loop over the trace: engine, virtual device and
# the replay's own bookkeeping, as `ns_per_op` times it), over every run the replay makes,
# and divides by runs x operations. Prints: trace, configuration, instructions per op, runs.
set -euo pipefail
binary=$1
trace=$2
conf=${3:-}
args=(replay "$trace" --json)
[ -n "$conf" ] && args+=(--conf "$conf")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
ops=$("$binary" "${args[@]}" 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['ops'])")
valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='*run_once*' \
    "$binary" "${args[@]}" > /dev/null 2>&1
callgrind_annotate --tree=caller "$out" 2>/dev/null | python3 -c '
import re, sys
ops, name, conf = int(sys.argv[1]), sys.argv[2], sys.argv[3]
total = runs = None
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \(.*\)\s+PROGRAM TOTALS", line)
    if m:
        total = int(m.group(1).replace(",", ""))
    m = re.search(r"replay::replay(_observed)? \((\d+)x\)", line)
    if m and runs is None:
        runs = int(m.group(2))
conf = conf or "default"
print(f"{name:32s} {conf:16s} instr/op {total / runs / ops:8.1f}  runs {runs}")
' "$ops" "$(basename "$trace" .csv)" "$conf"
