#!/usr/bin/env bash
# Call 28 (2026-12-06, eighth session): the script of calls 26-27 with other variants: an experiment, not a product build. .dev/wgpool-exp
# (branch exp-defer, not merged) can hold binds back and submit them as one
# vkQueueBindSparse: WGPOOL_EXP_DEFER_MAPS=N submits after N held maps (and before any
# range release, chunk free or wait for binds, and at the end of each replay run, inside
# its timed loop); with WGPOOL_EXP_DEFER_ALL set, unmaps are held too. Does batching binds
# cut bind time and the allocation time that binds in flight add (calls 7-8, 21)? From call
# 27 the binary also prints, per run, the loop's time and then how long the binds it
# submitted took to be applied after it (`EXPWAIT loop wait`): the time until the memory
# is usable. Call 26 ran an earlier loop (both slack ramps; see docs/BENCHMARKS.md).
# Call 28: WGPOOL_EXP_LARGE_PAGE=2097152 maps the compact policy's large blocks in 2 MiB
# pages instead of 512 KiB (does the driver bind and allocate faster in 2 MiB pages?), and
# policy:pytorch in pages mode (20 MiB pages for large blocks).
# Run with carry [".gl", ".dev"]; ROUNDS (default 2).
set -uo pipefail
ROUNDS=${ROUNDS:-2}
[ -n "${NO_DEBS:-}" ] || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
if ! .dev/wgpool-exp info --adapter nvidia > /dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces kv-decode-cat resnet50-amp > /dev/null
: > "$OUT/replay.jsonl"
torch() {
  PYTORCH_CUDA_ALLOC_CONF=$2 timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 2 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch $1 ${2:-native} first %.3f rest %.3f' % (r['first_s'], r['rest_median_s']))"
}
wg() {
  out=$(env $3 timeout 60 .dev/wgpool-exp replay /tmp/traces/$1.csv --gpu --json --repeat 2 --conf "$2" 2>/tmp/err.txt)
  waits=$(grep EXPWAIT /tmp/err.txt | head -2 | awk '{printf "%s+%s ", $2, $3}')
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']=$round; r['env']='$3'
print(json.dumps(r))
f=r['runs'][0]
print('$round wgpool $1 $2 [$3] first wall %.3f drv %.3f alloc %.3f bind %.3f allocs %d binds %d dev %.3f GB; rest wall %.3f binds %d; loop+applied: $waits' % (f['replay_time_s'], f['driver_time_s'], r['allocation_time_s'], r['bind_time_s'], f['device_allocations'], f['bind_calls'], r['device_memory_peak_bytes']/1e9, r['rest_median']['replay_time_s'], r['rest_median']['bind_calls']), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2 $3: no report"
}
for round in $(seq 1 "$ROUNDS"); do
  for t in gpt2-train resnet50-amp kv-decode-cat; do
    for e in X=0 WGPOOL_EXP_LARGE_PAGE=2097152 "WGPOOL_EXP_LARGE_PAGE=2097152 WGPOOL_EXP_DEFER_ALL=1 WGPOOL_EXP_DEFER_MAPS=1000000"; do
      wg $t expandable_segments:True "$e"
    done
    wg $t policy:pytorch,expandable_segments:True X=0
    wg $t "policy:pytorch,expandable_segments:True" "WGPOOL_EXP_DEFER_ALL=1 WGPOOL_EXP_DEFER_MAPS=1000000"
    wg $t expandable_segments:False X=0
  done
done
date -u
