#!/usr/bin/env bash
# Call 33 (2026-12-06, ninth session): (1) the GPU test binaries sparse_gpu and pool_gpu on
# NVIDIA, before bind batching (.dev/base, build 864adaf) and with it (.dev/tests), one test
# at a time, to tell failures of lavapipe-sized assumptions from failures of the change;
# (2) GPT-2 and the decode with maps queued in batches of 16 (the default), 4 and 1, and
# PyTorch's first run of the decode, ROUNDS rounds (default 3). Binaries: .dev/wgpool (the
# commit is in .dev/COMMIT). Run with carry [".gl", ".dev"].
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
for build in base tests; do
  for t in sparse_gpu pool_gpu; do
    echo "== $build $t"
    timeout 200 .dev/$build/$t --test-threads 1 > "$OUT/$build-$t.txt" 2>&1
    echo "exit $?"
    grep -E "FAILED|^test result" "$OUT/$build-$t.txt" | head -12
    tail -2 "$OUT/$build-$t.txt"
  done
done
mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces kv-decode-cat > /dev/null
: > "$OUT/replay.jsonl"
torch() {
  PYTORCH_CUDA_ALLOC_CONF=$2 timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 2 2>/dev/null \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$round torch $1 ${2:-native} first %.3f rest %.3f' % (r['first_s'], r['rest_median_s']))"
}
wg() {
  out=$(timeout 60 .dev/wgpool replay /tmp/traces/$1.csv --gpu --json --repeat 3 --conf "$2" 2>/dev/null)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']=$round; r['conf_given']='$2'
print(json.dumps(r))
f=r['runs'][0]; m=r['rest_median']
print('$round wgpool $1 $2 first wall %.3f drv %.3f alloc %.3f bind %.3f heapq %.3f calls %d queued %d dev %.3f GB pool %.0f ns/op; rest wall %.3f drv %.3f pool %.0f calls %d' % (f['replay_time_s'], f['driver_time_s'], r['allocation_time_s'], r['bind_time_s'], f['heap_query_s'], f['bind_calls'], r['maps_queued'], r['device_memory_peak_bytes']/1e9, f['pool_ns_per_op'], m['replay_time_s'], m['driver_time_s'], m['pool_ns_per_op'], m['bind_calls']), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2: no report"
}
for round in $(seq 1 "$ROUNDS"); do
  torch kv-decode-cat ""
  for t in kv-decode-cat gpt2-train; do
    for conf in expandable_segments:True page_bind_batch:4 page_bind_batch:1 expandable_segments:False; do
      wg $t $conf
    done
  done
done
date -u
