#!/usr/bin/env bash
# Call 86 (2026-12-07, twenty-fifth session). Carry [".gl", ".dev"] (.dev/wgpool: fd59206's
# release build, whose engine and pool the session has not changed). A long training loop on
# the GPU: each of issue 21's training traces replayed thirty times in one process with the
# cache kept (`--repeat 30 --keep-cache`), in pages mode (default), in segments mode and in
# pages mode with the slack in full from the start (`compact_slack_ramp:0`). Prints, per
# configuration, the bind calls and pool time of each run, and the device memory peak.
# Every file ends in $OUT/call86.tgz.
set -uo pipefail
. docs/runs/device-env.sh
. docs/runs/prepare-traces.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in gpt2-train resnet50-amp bert-base-varlen; do
  for conf in default expandable_segments:False compact_slack_ramp:0; do
    args=(replay /tmp/traces/$t.csv --gpu --repeat 30 --keep-cache --json)
    [ "$conf" = default ] || args+=(--conf "$conf")
    timeout 150 .dev/wgpool "${args[@]}" > "$OUT/$t-$conf.json" 2> "$OUT/$t-$conf.err"
    python3 - "$OUT/$t-$conf.json" "$t" "$conf" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
runs = d['runs']
binds = [r.get('bind_calls') for r in runs]
pool = [round(r['pool_ns_per_op']) for r in runs]
print(sys.argv[2], sys.argv[3], 'device peak', d['device_memory_peak_bytes'],
      'peak reserved / live', round(d['ratio'], 5), 'engine ns/op', round(d['engine_ns_per_op'], 1))
print('  binds', binds)
print('  pool ns/op', pool)
print('  rest median', d['rest_median'])
PY
  done
done
(cd "$OUT" && tar czf /tmp/call86.tgz . && find . -mindepth 1 -delete && mv /tmp/call86.tgz .)
