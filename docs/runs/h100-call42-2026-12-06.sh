#!/usr/bin/env bash
# Call 42 (2026-12-06, tenth session): call 41 again with each range in a PagedMemory of its
# own and a page mapped right after it is reserved (as pools do): does the driver crash in
# vkAllocateMemory, and at what total? Carry [".gl", ".dev"].
set -uo pipefail
. docs/runs/device-env.sh
for s in 4096 1024; do
  k=$(( 1048576 / s ))
  timeout 120 .dev/probe/page_costs --fill-ranges $k --fill-range-mib $s --fill-interleave \
    > /dev/null 2> "$OUT/il-$s.txt"
  echo "interleaved, ranges of $s MiB: exit $? :: $(grep -c 'FILL map' "$OUT/il-$s.txt") maps :: $(grep -E 'failed|FILL ok' "$OUT/il-$s.txt" | head -2 | cut -c1-300)"
done
