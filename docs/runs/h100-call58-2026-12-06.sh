#!/usr/bin/env bash
# Call 58 (2026-12-06, fourteenth session): `page_bind_batch` now that unmaps queue too.
# .dev/wgpool (.dev/COMMIT) reports, per run, `bind_wait_s`: the wait after the run until
# every bind it submitted was applied (a larger batch may only move bind work past the
# timed loop). For each of ROUNDS interleaved rounds (default 2) and each trace: PyTorch
# 2.11's first run (native), first runs (`--repeat 3`) in pages mode with page_bind_batch
# 16 (the default), 64 and 256, and in segments mode. Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-2}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT
. docs/runs/prepare-traces.sh
. docs/runs/replay-helper.sh
figures() {
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   first %.3f + bind wait %.4f s; heap queries %.4f s; allocation %.4f s, binds %d calls %.4f s' % (f['replay_time_s'], f['bind_wait_s'], f['heap_query_s'], r['allocation_time_s'], f['bind_calls'], r['bind_time_s']))"
}
for round in $(seq 1 "$ROUNDS"); do
  for t in kv-decode-cat gpt2-train resnet50-amp bert-base-varlen; do
    timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$t.csv --repeat 3 2>/dev/null \
      | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch $t native first %.3f s' % r['first_s'])"
    for batch in 16 64 256; do
      wg $t page_bind_batch:$batch "--repeat 3" wgpool; figures
    done
    wg $t expandable_segments:False "--repeat 3" wgpool; figures
  done
done
date -u
