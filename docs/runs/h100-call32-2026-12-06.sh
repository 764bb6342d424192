#!/usr/bin/env bash
# Call 32 (2026-12-06, ninth session): maps queued for shared bind calls (`page_bind_batch`,
# default 16) against a call per map (`page_bind_batch:1`), on issue 21's four traces, with
# fixed segments and PyTorch's first run of the decode in the same rounds. First, the GPU
# test binaries that exercise queued maps on NVIDIA's own bind queue (wgpu's submissions then
# go through a gate of their own that submits the queued maps first).
# Binaries: .dev/wgpool and .dev/tests/* (the commit is in .dev/COMMIT). Run with carry
# [".gl", ".dev"]; ROUNDS (default 2).
set -uo pipefail
ROUNDS=${ROUNDS:-2}
[ -n "${NO_DEBS:-}" ] || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
if ! .dev/wgpool info --adapter nvidia > /dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT 2>/dev/null
for t in .dev/tests/*; do
  echo "== $(basename "$t")"
  timeout 180 "$t" 2>&1 | grep -E "^test result|FAILED|panicked|failures:" | head -8
  echo "exit ${PIPESTATUS[0]}"
done
mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces resnet50-amp bert-base-varlen kv-decode-cat > /dev/null
: > "$OUT/replay.jsonl"
torch() {
  PYTORCH_CUDA_ALLOC_CONF=$2 timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 2 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch $1 ${2:-native} first %.3f rest %.3f' % (r['first_s'], r['rest_median_s']))"
}
wg() {
  out=$(timeout 60 .dev/wgpool replay /tmp/traces/$1.csv --gpu --json --repeat 2 --conf "$2" 2>/dev/null)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']=$round; r['conf_given']='$2'
print(json.dumps(r))
f=r['runs'][0]
print('$round wgpool $1 $2 first wall %.3f drv %.3f alloc %.3f bind %.3f allocs %d calls %d queued %d dev %.3f GB; pool %.0f ns/op; rest wall %.3f calls %d' % (f['replay_time_s'], f['driver_time_s'], r['allocation_time_s'], r['bind_time_s'], f['device_allocations'], f['bind_calls'], r['maps_queued'], r['device_memory_peak_bytes']/1e9, f['pool_ns_per_op'], r['rest_median']['replay_time_s'], r['rest_median']['bind_calls']), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2: no report"
}
for round in $(seq 1 "$ROUNDS"); do
  torch kv-decode-cat ""
  for t in kv-decode-cat gpt2-train resnet50-amp bert-base-varlen; do
    for conf in expandable_segments:True page_bind_batch:1 expandable_segments:False; do
      wg $t $conf
    done
  done
done
date -u
