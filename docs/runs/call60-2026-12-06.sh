#!/usr/bin/env bash
# Call 60 (2026-12-06, fifteenth session): issue 21's table before and after in one call, with
# PyTorch 2.11 in the same call, and the wait for binds of the build before queued unmaps
# (call 59's question).
#
# Binaries (release, stripped), carried in .dev/:
#   .dev/wgpool-old   b244e2c, the build issue 21 was filed on (no --repeat: one run)
#   .dev/wgpool-prev  5fd2dc2 with the replay's `bind_wait_s` (maps queued, unmaps not)
#   .dev/wgpool       this session's build (.dev/COMMIT)
#   .dev/*_gpu        this build's GPU test binaries (`cargo test --release --no-run`)
# For each of ROUNDS interleaved rounds (default 3) and each trace: PyTorch's caching
# allocator from C++ (native and expandable segments, `--repeat 5`: first run and the median
# of the rest), b244e2c's replay in both modes, this build's (`--repeat 5`, cache released
# between runs) in both modes, and 5fd2dc2's in pages mode (`--repeat 3`). Rounds stop
# once STOP_AT seconds (default 400) have passed, so that the engine comparison and the
# NVIDIA tests still run. Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
STOP_AT=${STOP_AT:-400}
. docs/runs/table-helper.sh
usable() {
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   wall %.3f + bind wait %.4f = %.3f s; drv %.3f; dev %.3f GB; rest replay %.3f' % (r['wall_time_s'], f['bind_wait_s'], r['wall_time_s'] + f['bind_wait_s'], f['driver_time_s'], r['device_memory_peak_bytes']/1e9, r['rest_median']['replay_time_s']))"
}
for round in $(seq 1 "$ROUNDS"); do
  [ "$SECONDS" -lt "$STOP_AT" ] || { echo "round $round skipped at ${SECONDS}s"; break; }
  for t in $TRACES; do
    torch $t ""
    torch $t expandable_segments:True
    old $t expandable_segments:True
    wg $t expandable_segments:True "--repeat 5" wgpool; usable
    wg $t expandable_segments:True "--repeat 3" wgpool-prev; usable
    old $t expandable_segments:False
    wg $t expandable_segments:False "--repeat 5" wgpool; usable
  done
done
echo "== the engine alone on the host CPU: default / policy:pytorch, b244e2c and now (${SECONDS}s)"
timeout 100 python3 tools/engine_cost.py --base .dev/wgpool-old --rounds 2 .dev/wgpool \
  $(for t in $TRACES; do printf '/tmp/traces/%s.csv ' "$t"; done) | tee "$OUT/engine-cost.md"
for t in sparse_gpu pool_gpu submissions_gpu residency_gpu; do
  echo "== $t (${SECONDS}s)"
  timeout 100 .dev/$t --test-threads 1 2>&1 | grep -E "^test result|FAILED|panicked" | head -12
done
date -u
