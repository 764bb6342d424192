#!/usr/bin/env bash
# Call 87 (2026-12-07, twenty-fifth session). Carry [".gl", ".dev"] (.dev/wgpool: fd59206's
# release build). What a loop's continued remapping costs on the GPU, for the workloads whose
# live set changes shape (ten engine passes map 2.0x to 3.7x their peak: docs/BENCHMARKS.md,
# twenty-fifth session): each replayed ten times in one process with the cache kept
# (`--repeat 10 --keep-cache`), in pages mode (default) and in segments mode. Prints, per
# configuration, each run's bind calls, driver time and replay time, the rest runs' median
# pool and engine time per operation, and the device memory peak. Files in $OUT/$NAME.tgz.
# CONFS (default `default expandable_segments:False`) and NAME (default call87) let call 88
# run the same with other configurations.
set -uo pipefail
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/traces
python3 tools/synth_traces.py /tmp/traces moe-varying-experts serve-1b-grow train-eval-phases \
  convnet-multiscale > /dev/null
for t in moe-varying-experts serve-1b-grow train-eval-phases convnet-multiscale; do
  for conf in ${CONFS:-default expandable_segments:False}; do
    args=(replay /tmp/traces/$t.csv --gpu --repeat 10 --keep-cache --json)
    [ "$conf" = default ] || args+=(--conf "$conf")
    timeout 120 .dev/wgpool "${args[@]}" > "$OUT/$t-$conf.json" 2> "$OUT/$t-$conf.err"
    python3 - "$OUT/$t-$conf.json" "$t" "$conf" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
runs = d['runs']
rest = d['rest_median']
last = runs[-1]
print(sys.argv[2], sys.argv[3], 'first run device peak / live',
      round(d['device_memory_peak_bytes'] / d['peak_live_bytes'], 4),
      'all runs', round(last.get('device_memory_peak_bytes', 0) / d['peak_live_bytes'], 4),
      'reserved', round(last.get('peak_reserved_bytes', 0) / d['peak_live_bytes'], 4),
      'rest pool', round(rest['pool_ns_per_op']), 'engine', round(d['engine_ns_per_op']))
print('  binds', [r['bind_calls'] for r in runs])
print('  driver ms', [round(r['driver_time_s'] * 1e3, 1) for r in runs])
print('  replay ms', [round(r['replay_time_s'] * 1e3, 1) for r in runs])
print('  bind wait ms', [round(r['bind_wait_s'] * 1e3, 1) for r in runs])
PY
  done
done
name=${NAME:-call87}
(cd "$OUT" && tar czf /tmp/$name.tgz . && find . -mindepth 1 -delete && mv /tmp/$name.tgz .)
