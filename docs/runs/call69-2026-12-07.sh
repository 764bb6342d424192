#!/usr/bin/env bash
# Call 69 (2026-12-07, nineteenth session): the README's main job on NVIDIA, `wgpool bench`
# (quick, then in full), whose alloc rows now time the hot path (the GPT-2 trace with the
# cache kept) beside the runs from an empty cache, three times each. Carry [".gl", ".dev"]
# (.dev/wgpool at .dev/COMMIT).
set -uo pipefail
. docs/runs/device-env.sh
cat .dev/COMMIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for i in 1 2 3; do
  timeout 150 .dev/wgpool bench --quick --json > "$OUT/bench-quick-$i.json"
  python3 -c "
import json,sys
r=json.load(open(sys.argv[1]))
for row in r['alloc']['rows']:
    print('$i', row['mode'], 'hot %.1f / %.1f = %.2f; empty cache %.1f / %.1f = %.2f' % (row['hot_pool_ns_per_op'], row['hot_engine_ns_per_op'], row['hot_pool_over_engine'], row['pool_ns_per_op'], row['engine_ns_per_op'], row['pool_over_engine']))
" "$OUT/bench-quick-$i.json"
done
timeout 300 .dev/wgpool bench | tail -45
date -u
