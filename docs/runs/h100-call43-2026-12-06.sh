#!/usr/bin/env bash
# Call 43 (2026-12-06, tenth session): the GPU tests on NVIDIA with the address space pools
# may reserve capped at half of what the driver reports (.dev/tests, built from the commit in
# .dev/COMMIT): sparse_gpu whole (nothing skipped) and pool_gpu, one test at a time; and
# `wgpool info`'s page-mapping line. Carry [".gl", ".dev"].
set -uo pipefail
[ -n "${NO_DEBS:-}" ] || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
if ! .dev/wgpool info --adapter nvidia > /dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
date -u
cat .dev/COMMIT
.dev/wgpool info 2>/dev/null | grep -iE "address space|page_mapping"
for t in sparse_gpu pool_gpu; do
  echo "== $t"
  start=$(date +%s)
  timeout 280 .dev/tests/$t --test-threads 1 > "$OUT/$t.txt" 2>&1
  echo "exit $? in $(( $(date +%s) - start )) s"
  grep -E "FAILED|panicked|^test result" "$OUT/$t.txt" | head -12
done
