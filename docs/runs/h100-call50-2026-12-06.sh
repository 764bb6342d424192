#!/usr/bin/env bash
# Call 50 (2026-12-06, twelfth session): the owner bias. Three variants in ROUNDS
# interleaved rounds (default 3): .dev/wgpool-base (fd73adc, before the bias), .dev/wgpool
# (9d6280c) with its default (the bias on) and with --no-owner-bias. For each of the four
# traces: PyTorch 2.11's first run (native), the default build's first run in both modes
# (`replay --gpu --repeat 3`), and runs 2-5 with the cache kept (pool and engine ns/op) of
# all three variants in both modes. Then the owner-bias and stress tests on NVIDIA.
# Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT .dev/COMMIT-base
mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces kv-decode-cat resnet50-amp bert-base-varlen > /dev/null
TRACES="gpt2-train resnet50-amp bert-base-varlen kv-decode-cat"
: > "$OUT/replay.jsonl"
torch() {
  timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 3 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch $1 native first %.3f rest %.3f s, rest %.0f ns/op' % (r['first_s'], r['rest_median_s'], r['ns_per_op_rest_median']))"
}
# wg TRACE CONF ARGS BUILD [VARIANT-FLAG]
wg() {
  out=$(timeout 90 .dev/$4 replay /tmp/traces/$1.csv --gpu --json $3 ${5:-} --conf "$2" 2>/dev/null)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']=$round; r['conf_given']='$2'; r['args']='$3 ${5:-}'; r['build']='$4'
print(json.dumps(r))
f=r['runs'][0]; m=r['rest_median']
print('$round $4${5:-} $1 $2 $3 bias %s first wall %.3f drv %.3f dev %.3f GB pool %.0f; rest wall %.3f pool %.0f engine %.0f ratio %.2f' % (r.get('owner_bias'), f['replay_time_s'], f['driver_time_s'], r['device_memory_peak_bytes']/1e9, f['pool_ns_per_op'], m['replay_time_s'], m['pool_ns_per_op'], r['engine_ns_per_op'], m['pool_ns_per_op']/r['engine_ns_per_op']), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2 $4 ${5:-}: no report"
}
for round in $(seq 1 "$ROUNDS"); do
  for t in $TRACES; do
    torch $t
    for conf in expandable_segments:True expandable_segments:False; do
      wg $t $conf "--repeat 3" wgpool
      wg $t $conf "--repeat 5 --keep-cache" wgpool-base
      wg $t $conf "--repeat 5 --keep-cache" wgpool
      wg $t $conf "--repeat 5 --keep-cache" wgpool --no-owner-bias
    done
  done
done
timeout 120 .dev/owner_bias_gpu 2>&1 | tail -4
timeout 240 .dev/stress_gpu --test-threads 1 2>&1 | tail -4
date -u
