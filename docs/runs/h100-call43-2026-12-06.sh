#!/usr/bin/env bash
# Call 43 (2026-12-06, tenth session): the GPU tests on NVIDIA with the address space pools
# may reserve capped at half of what the driver reports (.dev/tests, built from the commit in
# .dev/COMMIT): sparse_gpu whole (nothing skipped) and pool_gpu, one test at a time; and
# `wgpool info`'s page-mapping line. Carry [".gl", ".dev"].
set -uo pipefail
. docs/runs/device-env.sh
cat .dev/COMMIT
.dev/wgpool info 2>/dev/null | grep -iE "address space|page_mapping"
for t in sparse_gpu pool_gpu; do
  echo "== $t"
  start=$(date +%s)
  timeout 280 .dev/tests/$t --test-threads 1 > "$OUT/$t.txt" 2>&1
  echo "exit $? in $(( $(date +%s) - start )) s"
  grep -E "FAILED|panicked|^test result" "$OUT/$t.txt" | head -12
done
