#!/usr/bin/env bash
# Call 59 (2026-12-06, fourteenth session): unmaps queued (.dev/wgpool, .dev/COMMIT) against
# maps queued only (.dev/wgpool-prev: 5fd2dc2 with the replay's `bind_wait_s` added), both
# at the default `page_bind_batch` (16), measured to the point where every bind is applied:
# first run (`--repeat 3`) wall time plus the wait for its binds after it. ROUNDS interleaved
# rounds (default 3); PyTorch 2.11's first run of the decode (native) in each. Carry
# [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT .dev/COMMIT-prev
. docs/runs/prepare-traces.sh
. docs/runs/replay-helper.sh
figures() {
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   first %.3f + bind wait %.4f = %.3f s; heap queries %.4f s; allocation %.4f s, binds %d calls %.4f s' % (f['replay_time_s'], f['bind_wait_s'], f['replay_time_s'] + f['bind_wait_s'], f['heap_query_s'], r['allocation_time_s'], f['bind_calls'], r['bind_time_s']))"
}
for round in $(seq 1 "$ROUNDS"); do
  timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/kv-decode-cat.csv --repeat 3 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch kv-decode-cat native first %.3f s' % r['first_s'])"
  for t in kv-decode-cat gpt2-train resnet50-amp bert-base-varlen; do
    wg $t expandable_segments:True "--repeat 3" wgpool-prev; figures
    wg $t expandable_segments:True "--repeat 3" wgpool; figures
  done
done
date -u
