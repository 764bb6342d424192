#!/usr/bin/env bash
# Call 45 (2026-12-06, tenth session): every GPU test binary that runs without the CLI on
# NVIDIA, one test at a time (.dev/tests.tgz, built from the commit in .dev/COMMIT, with the
# address space capped at half of what the driver reports). Carry [".gl", ".dev"].
set -uo pipefail
. docs/runs/device-env.sh
cat .dev/COMMIT
mkdir -p /tmp/t && tar xzf .dev/tests.tgz -C /tmp/t
. docs/runs/test-binaries.sh
run_test_binaries sparse_gpu pool_gpu kernels_gpu staging_gpu overflow_gpu residency_gpu \
  residency_copies_gpu reserve_gpu bindings_gpu capabilities_gpu monitor_gpu pool_history_gpu \
  bench_oversubscription_gpu
