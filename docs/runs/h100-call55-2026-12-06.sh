#!/usr/bin/env bash
# Call 55 (2026-12-06, thirteenth session). First, `page_bind_batch` against the decode's
# first run: .dev/wgpool (.dev/COMMIT) replays the decode with `--repeat 3` (cache released
# before the first run) at page_bind_batch 16 (the default), 64 and 256, and GPT-2 at 16 and
# 256, beside PyTorch 2.11's first run of the decode (native), ROUNDS interleaved rounds
# (default 3). Then this session's pool changes on NVIDIA: the owner-bias tests
# (.dev/owner_bias_gpu: a submission point on another thread leaves a pool that holds
# nothing back biased), the submission tests (.dev/submissions_gpu: the device's count of
# held blocks) and the residency tests (.dev/residency_gpu), then the
# four-thread evict-and-restore stress test RUNS more times (default 20): make_room now
# chooses again when every block it chose came into use on another thread. Test binaries
# built with `cargo test --release --no-run` at the commit in .dev/COMMIT-tests. Carry
# [".gl", ".dev"].
set -uo pipefail
RUNS=${RUNS:-20}
ROUNDS=${ROUNDS:-3}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT .dev/COMMIT-tests
. docs/runs/prepare-traces.sh
. docs/runs/replay-helper.sh
for round in $(seq 1 "$ROUNDS"); do
  timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/kv-decode-cat.csv --repeat 3 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch decode native first %.3f s' % r['first_s'])"
  for batch in 16 64 256; do
    wg kv-decode-cat page_bind_batch:$batch "--repeat 3" wgpool
  done
  for batch in 16 256; do
    wg gpt2-train page_bind_batch:$batch "--repeat 3" wgpool
  done
done
timeout 120 .dev/owner_bias_gpu 2>&1 | tail -5
timeout 240 .dev/submissions_gpu --test-threads 1 2>&1 | tail -5
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
