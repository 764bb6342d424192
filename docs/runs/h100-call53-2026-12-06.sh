#!/usr/bin/env bash
# Call 53 (2026-12-06, twelfth session): the record shelf that keeps records with their
# segment (.dev/wgpool, the commit in .dev/COMMIT) against the build before it
# (.dev/wgpool-prev, .dev/COMMIT-prev: the owner bias and the cheaper miss path), runs 2-5
# with the cache kept, all four traces in both modes, ROUNDS interleaved rounds (default 2);
# then the decode's first run (`--repeat 3`) of the new build in both modes beside PyTorch
# 2.11's first run (native). Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-2}
. docs/runs/device-env.sh
cat .dev/COMMIT .dev/COMMIT-prev
. docs/runs/prepare-traces.sh
. docs/runs/replay-helper.sh
for round in $(seq 1 "$ROUNDS"); do
  for t in $TRACES; do
    for conf in expandable_segments:True expandable_segments:False; do
      wg $t $conf "--repeat 5 --keep-cache" wgpool-prev
      wg $t $conf "--repeat 5 --keep-cache" wgpool
    done
  done
done
round=first
timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/kv-decode-cat.csv --repeat 3 2>/dev/null \
  | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('torch decode native first %.3f s' % r['first_s'])"
for conf in expandable_segments:True expandable_segments:False; do
  wg kv-decode-cat $conf "--repeat 3" wgpool
done
date -u
