#!/usr/bin/env bash
# Call 61 (2026-12-06, fifteenth session): the time until every bind is applied (the first
# run's `wall_time_s`, which includes the wait for binds) by `page_bind_batch` (1, 4, 16)
# against the build before queued unmaps (.dev/wgpool-prev: 5fd2dc2 with `bind_wait_s`),
# ROUNDS interleaved rounds (default 3), `--repeat 1`; then the engine alone on the host CPU,
# default against policy:pytorch, 5 rounds. Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
lscpu | grep -E "Model name" || true
cat .dev/COMMIT .dev/COMMIT-prev
. docs/runs/prepare-traces.sh
. docs/runs/replay-helper.sh
usable() {
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   wall %.3f (loop %.3f, bind wait %.4f, heap queries %.4f); allocation %.4f s, binds %d calls %.4f s' % (r['wall_time_s'], f['replay_time_s'], f['bind_wait_s'], f['heap_query_s'], r['allocation_time_s'], f['bind_calls'], r['bind_time_s']))"
}
for round in $(seq 1 "$ROUNDS"); do
  for t in bert-base-varlen gpt2-train resnet50-amp kv-decode-cat; do
    wg $t expandable_segments:True "--repeat 1" wgpool-prev; usable
    for batch in 1 4 16; do
      wg $t page_bind_batch:$batch "--repeat 1" wgpool; usable
    done
  done
done
echo "== the engine alone on the host CPU: default / policy:pytorch (${SECONDS}s)"
timeout 240 python3 tools/engine_cost.py --rounds 5 .dev/wgpool \
  $(for t in $TRACES; do printf '/tmp/traces/%s.csv ' "$t"; done) | tee "$OUT/engine-cost.md"
date -u
