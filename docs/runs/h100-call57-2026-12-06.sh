#!/usr/bin/env bash
# Call 57 (2026-12-06, fourteenth session): with unmaps queued beside maps (.dev/wgpool,
# .dev/COMMIT), does the page reserve now hide allocation time, and does a larger batch
# help? For each of ROUNDS interleaved rounds (default 2): PyTorch 2.11's first run of the
# decode (native), then first runs (`--repeat 3`) in pages mode of the four traces with
# `page_reserve_chunks` 0 (the default), 1 and 2, and of the decode and GPT-2 with
# `page_bind_batch:64`. Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-2}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT
. docs/runs/prepare-traces.sh
. docs/runs/replay-helper.sh
figures() {
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   heap queries %.4f s; allocation %.4f s (background %.4f s, %d; taken %d, waited %d), binds %d calls %.4f s; device memory %.3f GB' % (f['heap_query_s'], r['allocation_time_s'], r['background_allocation_time_s'], r['background_allocations'], r['reserve_taken'], r['reserve_waits'], f['bind_calls'], r['bind_time_s'], r['device_memory_peak_bytes'] / 1e9))"
}
for round in $(seq 1 "$ROUNDS"); do
  timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/kv-decode-cat.csv --repeat 3 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch kv-decode-cat native first %.3f s' % r['first_s'])"
  for t in kv-decode-cat gpt2-train resnet50-amp bert-base-varlen; do
    for reserve in 0 1 2; do
      wg $t page_reserve_chunks:$reserve "--repeat 3" wgpool; figures
    done
  done
  for t in kv-decode-cat gpt2-train; do
    wg $t page_bind_batch:64 "--repeat 3" wgpool; figures
  done
done
date -u
