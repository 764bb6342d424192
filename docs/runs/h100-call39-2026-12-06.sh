#!/usr/bin/env bash
# Call 39 (2026-12-06, tenth session): (1) whether NVIDIA's vkAllocateMemory runs in parallel
# on several threads (`page_costs --alloc-threads`: the same 32 MiB allocations of the
# chunks' memory type spread over 1, 2, 4 and 8 threads, three rounds); (2) where
# `exhausted_address_space_says_what_helps` crashes (a build of sparse_gpu that prints each
# pool it creates; under gdb where the machine has it). Binaries in .dev/probe. Run with
# carry [".gl", ".dev"].
set -uo pipefail
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
nproc
.dev/probe/page_costs --no-grow-dispatches --alloc-threads 1,2,4,8 --threads-total-mib 4096 \
  --threads-chunk-mib 32 > "$OUT/threads-32.json" 2> "$OUT/threads-32.err"
echo "page_costs exit $?"
.dev/probe/page_costs --no-grow-dispatches --alloc-threads 1,4 --threads-total-mib 4096 \
  --threads-chunk-mib 256 > "$OUT/threads-256.json" 2> "$OUT/threads-256.err"
echo "page_costs exit $?"
python3 - "$OUT" <<'PY'
import json, sys
for name in ("threads-32", "threads-256"):
    try:
        d = json.load(open(f"{sys.argv[1]}/{name}.json"))
    except Exception as e:
        print(name, "unreadable", e); continue
    for r in d["alloc_threads"]:
        print(name, r["round"], r["threads"], round(r["wall_ms"], 1), round(r["ms_per_gib"], 1), round(r["free_ms"], 1))
PY
which gdb strace 2>&1
ulimit -c 0
if command -v gdb > /dev/null; then
  timeout 300 gdb -batch -ex run -ex bt -ex "info threads" -ex "thread apply all bt 8" --args \
    .dev/probe/sparse_gpu exhausted_address_space_says_what_helps --nocapture --test-threads 1 \
    > "$OUT/segv.txt" 2>&1
else
  timeout 300 .dev/probe/sparse_gpu exhausted_address_space_says_what_helps --nocapture \
    --test-threads 1 > "$OUT/segv.txt" 2>&1
fi
echo "segv exit $?"
grep -c "PROGRESS pools" "$OUT/segv.txt"
tail -60 "$OUT/segv.txt"
