#!/usr/bin/env bash
# Call 41 (2026-12-06, tenth session): where NVIDIA's sparse address space really ends.
# `page_costs --fill-ranges K --fill-range-mib S --fill-maps M`: reserve K ranges of S MiB in
# one process, then map a page in each of the last M (each map allocates a chunk). Call 40
# found `vkAllocateMemory` crashing (SIGSEGV inside the driver) once 228 pools held a 4 GiB
# range each. One process per setting (a crash ends it). Carry [".gl", ".dev"].
set -uo pipefail
. docs/runs/device-env.sh
fill() {
  timeout 60 .dev/probe/page_costs --fill-ranges "$1" --fill-range-mib "$2" --fill-maps "$3" \
    > /dev/null 2> "$OUT/fill-$1-$2-$3.txt"
  echo "ranges $1 x $2 MiB, maps $3: exit $? :: $(grep -E 'FILL (ok|reserve .* failed)|address space' "$OUT/fill-$1-$2-$3.txt" | tr '\n' ' ' | cut -c1-220)"
}
for k in 200 216 224 226 227 228 229 230 232 240 248 255 256; do fill $k 4096 1; done
for k in 880 896 904 908 912 916 920 960; do fill $k 1024 1; done
fill 200 4096 16
fill 216 4096 16
fill 224 4096 4
