#!/bin/bash
# H200 call 8 (2026-12-03, third session): experiment, not committed code. Binds on a queue
# of another family (BIND_FAMILY=k, a local build of cf26db5 with that hack) against the
# pool's second queue of family 0: does vkAllocateMemory still wait for binds in flight?
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan
T=tests/data/gpt2-train.csv
date -u
row() { python3 -c "
import json,sys
r=json.load(sys.stdin)
print('$1', r['conf'] or '(default)', r['mode'], r['device_memory_peak_bytes'], 'driver', round(r['driver_time_s'],3), 'alloc', round(r['allocation_time_s'],3), 'bind', round(r['bind_time_s'],3), 'allocs', r['device_allocations'], 'binds', r['bind_calls'], 'reason', r.get('mode_reason'))
r['label']='$1'; open('$OUT/replay_gpu.jsonl','a').write(json.dumps(r)+'\n')
"; }
for round in 1 2 3; do
  .dev/wgpool_bf replay $T --gpu --json | row "r$round family0-queue1"
  BIND_FAMILY=1 .dev/wgpool_bf replay $T --gpu --json | row "r$round family1" || echo "family 1 failed"
  BIND_FAMILY=2 .dev/wgpool_bf replay $T --gpu --json | row "r$round family2" || echo "family 2 failed"
  .dev/wgpool_bf replay $T --gpu --json --conf expandable_segments:False | row "r$round segments"
done
for fam in "" 1; do
  echo "== sweep BIND_FAMILY=$fam"
  BIND_FAMILY=$fam .dev/page_costs_bf --no-grow-dispatches --alloc-sweep --sweep-total-mib 4096 > $OUT/sweep_$fam.json || echo failed
  python3 -c "
import json; r=json.load(open('$OUT/sweep_$fam.json'))
for s in r['alloc_sweep']:
    if s['chunk_bytes'] >= 64<<20: print(s['call'], s['chunk_bytes']>>20, 'MiB calls', s['calls'], 'mean %.3f first %.3f last %.3f ms, %.2f us/MiB' % (s['mean_ms'], s['first_ms'], s['last_ms'], s['us_per_mib']))"
done
date -u
