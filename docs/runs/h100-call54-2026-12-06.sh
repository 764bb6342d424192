#!/usr/bin/env bash
# Call 54 (2026-12-06, thirteenth session): issue 21's figures in one call with the build in
# .dev/wgpool (its commit in .dev/COMMIT), ROUNDS interleaved rounds (default 3). For each
# trace and round: PyTorch 2.11's first run and warm runs (native), then in both modes the
# first run (`--repeat 3`, cache released before it) and runs 2-9 with the cache kept
# (`--repeat 9 --keep-cache`: pool and engine ns per op, medians of eight runs) of the build
# before this session's frees change (.dev/wgpool-prev, .dev/COMMIT-prev) and of the new one.
# Then the engine alone, default against policy:pytorch (tools/engine_cost.py). Carry
# [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT .dev/COMMIT-prev
. docs/runs/prepare-traces.sh
. docs/runs/replay-helper.sh
torch() {
  timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 3 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch $1 native first %.3f rest %.3f s, rest %.0f ns/op' % (r['first_s'], r['rest_median_s'], r['ns_per_op_rest_median']))"
}
for round in $(seq 1 "$ROUNDS"); do
  for t in $TRACES; do
    torch $t
    for conf in expandable_segments:True expandable_segments:False; do
      wg $t $conf "--repeat 3" wgpool
      wg $t $conf "--repeat 9 --keep-cache" wgpool-prev
      wg $t $conf "--repeat 9 --keep-cache" wgpool
    done
  done
done
python3 tools/engine_cost.py --rounds 3 .dev/wgpool $(for t in $TRACES; do echo /tmp/traces/$t.csv; done)
date -u
