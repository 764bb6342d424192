#!/usr/bin/env bash
# Call 66 (2026-12-07, nineteenth session): every GPU test binary that runs without the CLI,
# on NVIDIA, one test at a time: the check of calls 45-46 again, with the test binaries
# added since (device_lost, owner_bias, stress, submissions, wrappers). The binaries are the
# debug test builds of the commit in .dev/COMMIT, stripped, in .dev/tests.txz: `tar cf - |
# xz --lzma2=preset=6,dict=320MiB`, a dictionary that spans the binaries, so that the code
# they share is stored once (300 MB to 25 MB; the carry limit is 64 MiB). Carry [".gl",
# ".dev"] (nothing else in .dev: no wgpool binary, so the Vulkan driver is named outright).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
date -u; cat .dev/COMMIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/t && tar xJf .dev/tests.txz -C /tmp/t
. docs/runs/test-binaries.sh
run_test_binaries ${ONLY:-sparse_gpu pool_gpu kernels_gpu staging_gpu overflow_gpu residency_gpu \
  residency_copies_gpu reserve_gpu bindings_gpu capabilities_gpu monitor_gpu pool_history_gpu \
  bench_oversubscription_gpu device_lost_gpu owner_bias_gpu stress_gpu submissions_gpu \
  wrappers_gpu}
date -u
