#!/usr/bin/env bash
# Call 49 (2026-12-06, eleventh session): two builds in ROUNDS interleaved rounds
# (default 3): before this session (5b98006, .dev/wgpool-base) and with the reference bank
# and the full cache's flush (cf39ee2, .dev/wgpool). For each of
# the four traces, PyTorch 2.11's first run (native), then each build's first run in both
# modes (`replay --gpu --repeat 3`) and runs 2-5 with the cache kept (pool and engine ns/op).
# Then the device-lost tests on NVIDIA (.dev/device_lost_gpu). Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT
mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces kv-decode-cat resnet50-amp bert-base-varlen > /dev/null
TRACES="gpt2-train resnet50-amp bert-base-varlen kv-decode-cat"
: > "$OUT/replay.jsonl"
torch() {
  timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 3 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch $1 native first %.3f rest %.3f s, rest %.0f ns/op' % (r['first_s'], r['rest_median_s'], r['ns_per_op_rest_median']))"
}
wg() {
  out=$(timeout 90 .dev/$4 replay /tmp/traces/$1.csv --gpu --json $3 --conf "$2" 2>/dev/null)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']=$round; r['conf_given']='$2'; r['args']='$3'; r['build']='$4'
print(json.dumps(r))
f=r['runs'][0]; m=r['rest_median']
print('$round $4 $1 $2 $3 first wall %.3f drv %.3f dev %.3f GB pool %.0f; rest wall %.3f pool %.0f engine %.0f ratio %.2f' % (f['replay_time_s'], f['driver_time_s'], r['device_memory_peak_bytes']/1e9, f['pool_ns_per_op'], m['replay_time_s'], m['pool_ns_per_op'], r['engine_ns_per_op'], m['pool_ns_per_op']/r['engine_ns_per_op']), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2 $4: no report"
}
for round in $(seq 1 "$ROUNDS"); do
  for t in $TRACES; do
    torch $t
    for conf in expandable_segments:True expandable_segments:False; do
      for build in wgpool-base wgpool; do
        wg $t $conf "--repeat 3" $build
        wg $t $conf "--repeat 5 --keep-cache" $build
      done
    done
  done
done
timeout 120 .dev/device_lost_gpu --test-threads 1 2>&1 | tail -8
date -u
