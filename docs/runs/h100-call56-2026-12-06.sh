#!/usr/bin/env bash
# Call 56 (2026-12-06, fourteenth session): unmaps queued with maps for shared bind calls.
# .dev/wgpool (.dev/COMMIT) queues unmaps and unbinds of spare pages on the device beside
# the maps (`page_bind_batch`); .dev/wgpool-prev (.dev/COMMIT-prev) queues maps only. For
# each of ROUNDS interleaved rounds (default 3) and each trace: PyTorch 2.11's first run
# (native), then the first run (`--repeat 3`, the cache released before it) in pages mode
# by both builds and in segments mode by the new one. Then this build's sparse, pool,
# residency and submission tests on NVIDIA, whose binds use a queue of their own (test
# binaries from `cargo test --release --no-run` at .dev/COMMIT-tests). Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT .dev/COMMIT-prev .dev/COMMIT-tests
. docs/runs/prepare-traces.sh
. docs/runs/replay-helper.sh
torch() {
  timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 3 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch $1 native first %.3f s' % r['first_s'])"
}
binds() {
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   binds %d calls, %d maps and %s unmaps queued, %.4f s; allocation %.4f s' % (f['bind_calls'], r['maps_queued'], r.get('unmaps_queued', '-'), r['bind_time_s'], r['allocation_time_s']))"
}
for round in $(seq 1 "$ROUNDS"); do
  for t in kv-decode-cat gpt2-train resnet50-amp bert-base-varlen; do
    torch $t
    wg $t expandable_segments:True "--repeat 3" wgpool-prev; binds
    wg $t expandable_segments:True "--repeat 3" wgpool; binds
    wg $t expandable_segments:False "--repeat 3" wgpool
  done
done
for t in sparse_gpu pool_gpu submissions_gpu; do
  echo "== $t"
  timeout 300 .dev/$t --test-threads 1 2>&1 | grep -E "^test result|FAILED|panicked" | head -12
done
echo "== residency_gpu"
timeout 300 .dev/residency_gpu --test-threads 1 2>&1 | grep -E "^test result|FAILED|panicked" | head -12
date -u
