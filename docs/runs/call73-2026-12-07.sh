#!/usr/bin/env bash
# Ran in the twenty-first session (2026-12-07, 12:57 UTC, H100; docs/BENCHMARKS.md, calls 74-75).
# Written when no machine could be started after call 72 (see the
# twentieth session's closing note). Call 73 ran as part of call 74.
# Call 73 (2026-12-07, twentieth session): every GPU test binary on NVIDIA, one test at a
# time, at the commit in .dev/COMMIT-tests (call 66 ran them at 8e9ce84, before the small kind's
# granule, 19d4818). .dev/tests.txz holds the debug test binaries and the debug `wgpool`
# binary, stripped (`tar cf - tests wgpool | xz --lzma2=preset=6,dict=320MiB`). The tests
# that run the CLI find it where cargo built it (/work/main/target/debug/wgpool) and read
# the repository's files from /work/main: both are made here when missing. The set-up is
# device-env.sh's (its log is $OUT/log.txt). Carry [".gl", ".dev"].
set -uo pipefail
. docs/runs/device-env.sh
cat .dev/COMMIT-tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/t && tar xJf .dev/tests.txz -C /tmp/t
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
mkdir -p /work/main/target/debug && cp /tmp/t/wgpool /work/main/target/debug/wgpool
. docs/runs/test-binaries.sh
run_test_binaries ${ONLY:-sparse_gpu pool_gpu kernels_gpu staging_gpu overflow_gpu residency_gpu \
  residency_copies_gpu reserve_gpu bindings_gpu capabilities_gpu monitor_gpu pool_history_gpu \
  bench_oversubscription_gpu device_lost_gpu owner_bias_gpu stress_gpu submissions_gpu \
  wrappers_gpu replay_gpu_cli}
date -u
