#!/usr/bin/env bash
# Call 55 (2026-12-06, thirteenth session): this session's pool changes on NVIDIA. The
# owner-bias tests (.dev/owner_bias_gpu: a submission point on another thread leaves a pool
# that holds nothing back biased) and the residency tests (.dev/residency_gpu), then the
# four-thread evict-and-restore stress test RUNS more times (default 20): make_room now
# chooses again when every block it chose came into use on another thread. Test binaries
# built with `cargo test --release --no-run` at the commit in .dev/COMMIT-tests. Carry
# [".gl", ".dev"].
set -uo pipefail
RUNS=${RUNS:-20}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT-tests
timeout 120 .dev/owner_bias_gpu 2>&1 | tail -5
timeout 240 .dev/residency_gpu --test-threads 1 2>&1 | tail -14
passed=0
failed=0
for i in $(seq 1 "$RUNS"); do
  if timeout 60 .dev/residency_gpu four_threads > "$OUT/stress-$i.txt" 2>&1; then
    passed=$((passed + 1))
    rm -f "$OUT/stress-$i.txt"
  else
    failed=$((failed + 1))
    tail -20 "$OUT/stress-$i.txt"
  fi
done
echo "four_threads stress: $passed passed, $failed failed of $RUNS"
date -u
