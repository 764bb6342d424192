#!/usr/bin/env bash
# Call 91 (2026-12-08, twenty-sixth session). Carry [".gl", ".dev"]: .dev/wgpool (this
# session's release build, which reports `engine_peak_reserved_bytes` and has `reuse_cache`).
# Where the pool's placement departs from its engine's: the 17 synthetic workload traces
# (tools/synth_traces.py) and GPT-2, each replayed once at full size through the pool
# (`replay --gpu --json`) with the default policy in fixed segments with the reuse cache on
# (`reuse_cache:True`, the default before this session) and in pages mode (the cache on by
# default), and in fixed segments under `policy:pytorch` (cache off, CUDA segment addresses:
# expected equal); each report gives the pool's peak reserved and device memory
# beside the engine alone's peak reserved on a model of the same device. Prints one line a
# replay; every report ends in $OUT/call91.tgz.
set -uo pipefail
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/synth "$OUT/reports"
python3 tools/synth_traces.py /tmp/synth > /dev/null
cp tests/data/gpt2-train.csv /tmp/synth/
for mode in False True pytorch; do
  for t in /tmp/synth/*.csv; do
    n=$(basename "$t" .csv)
    conf=expandable_segments:$mode
    [ "$mode" = False ] && conf=expandable_segments:False,reuse_cache:True
    [ "$mode" = pytorch ] && conf=policy:pytorch
    timeout 60 .dev/wgpool replay "$t" --gpu --json --conf "$conf" \
      > "$OUT/reports/$n-$mode.json" 2> "$OUT/reports/$n-$mode.err"
    python3 - "$OUT/reports/$n-$mode.json" "$n" "$mode" <<'PY' || echo "$n $mode: no report"
import json, sys
d = json.load(open(sys.argv[1]))
live = d['peak_live_bytes']
pool, engine = d['peak_reserved_bytes'], d['engine_peak_reserved_bytes']
print('%-26s %-5s pool %.5f engine %.5f pool/engine %.5f device %.5f first run %.3f s'
      % (sys.argv[2], sys.argv[3], pool / live, engine / live, pool / engine,
         d['device_memory_peak_bytes'] / live, d['wall_time_s']))
PY
  done
done
(cd "$OUT" && tar czf /tmp/call91.tgz . && find . -mindepth 1 -delete && mv /tmp/call91.tgz .)
