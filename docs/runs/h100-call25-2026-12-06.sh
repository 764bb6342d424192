#!/usr/bin/env bash
# Call 25 (2026-12-06, eighth session): the first run of the decode and of GPT-2 in page mode
# with the page reserve (`page_reserve_chunks`) and a short slack ramp
# (`compact_slack_ramp`), against fixed segments and PyTorch in the same call.
#
# Binary (release, stripped): .dev/wgpool (the commit is in .dev/COMMIT). Traces:
# tests/data/gpt2-train.csv and kv-decode-cat from tools/synth_traces.py (as in calls 14-24).
# Run with carry [".gl", ".dev"]; ROUNDS (default 3).
set -uo pipefail
ROUNDS=${ROUNDS:-3}
[ -n "${NO_DEBS:-}" ] || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
if ! .dev/wgpool info --adapter nvidia > /dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT 2>/dev/null
mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces kv-decode-cat > /dev/null
: > "$OUT/replay.jsonl"
torch() {
  PYTORCH_CUDA_ALLOC_CONF=$2 timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 2 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch $1 ${2:-native} first %.3f rest %.3f' % (r['first_s'], r['rest_median_s']))"
}
wg() {
  out=$(timeout 60 .dev/wgpool replay /tmp/traces/$1.csv --gpu --json --repeat 2 --conf "$2" 2>/dev/null)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']=$round
print(json.dumps(r))
f=r['runs'][0]
print('$round wgpool $1 $2 first wall %.3f drv %.3f alloc %.3f bind %.3f bg %.3f taken %d waits %d allocs %d binds %d dev %.3f GB' % (f['replay_time_s'], f['driver_time_s'], r['allocation_time_s'], r['bind_time_s'], r['background_allocation_time_s'], r['reserve_taken'], r['reserve_waits'], f['device_allocations'], f['bind_calls'], r['device_memory_peak_bytes']/1e9), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2: no report"
}
for round in $(seq 1 "$ROUNDS"); do
  torch kv-decode-cat ""
  torch kv-decode-cat expandable_segments:True
  for conf in expandable_segments:True page_reserve_chunks:1 compact_slack_ramp:0.02 \
      compact_slack_ramp:0.02,page_reserve_chunks:1 compact_slack_ramp:0.02,page_reserve_chunks:2 \
      compact_slack_ramp:0,page_reserve_chunks:2 expandable_segments:False; do
    wg kv-decode-cat "$conf"
  done
  torch gpt2-train ""
  for conf in expandable_segments:True page_reserve_chunks:1 page_reserve_chunks:2 expandable_segments:False; do
    wg gpt2-train "$conf"
  done
done
date -u
