#!/bin/bash
# H200 call 7 (2026-12-03, third session; second attempt, build of 462b8e2 plus the sweep's
# bind-waited and plain-allocation rows): replay --gpu of GPT-2 in both modes
# under the new recycling rule; what the recycling rate costs on random mixes; vkAllocateMemory
# against create_buffer at the same fill.
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan
T=tests/data/gpt2-train.csv
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
.dev/wgpool info | head -20
row() { python3 -c "
import json,sys
for r in [json.load(sys.stdin)]:
    print('$1', r['conf'] or '(default)', r['mode'], 'ratio %.4f' % r['ratio'], r['peak_reserved_bytes'], r['device_memory_peak_bytes'], round(r['device_over_reserved'],4), 'driver', round(r['driver_time_s'],3), 'alloc', round(r['allocation_time_s'],3), 'bind', round(r['bind_time_s'],3), 'allocs', r['device_allocations'], 'frees', r['device_frees'], 'binds', r['bind_calls'], 'wall', round(r['wall_time_s'],3)); sys.stdout.flush()
    r['label']='$1'; open('$OUT/replay_gpu.jsonl','a').write(json.dumps(r)+'\n')
"; }
echo "== gpt2 replay --gpu, alternating"
for round in 1 2 3; do
  for c in "" "expandable_segments:False"; do .dev/wgpool replay $T --gpu --json --conf "$c" | row gpt2-$round; done
done
for t in random_borders rmix2; do
  echo "== $t replay --gpu"
  for round in 1 2; do
    for c in "" "compact_recycle_rate:0" "expandable_segments:False"; do .dev/wgpool replay .dev/$t.csv --gpu --json --conf "$c" | row $t-$round; done
  done
done
date -u
echo "== alloc sweep: vkAllocateMemory against create_buffer"
.dev/page_costs --no-grow-dispatches --alloc-sweep --sweep-total-mib 8192 > $OUT/sweep.json
python3 -c "
import json; r=json.load(open('$OUT/sweep.json'))
for s in r['alloc_sweep']: print(s['call'], s['chunk_bytes']>>20, 'MiB', 'q' if s['budget_query_between'] else '-', 'calls', s['calls'], 'mean %.3f med %.3f first %.3f last %.3f ms, %.2f us/MiB, free %.3f ms' % (s['mean_ms'], s['median_ms'], s['first_ms'], s['last_ms'], s['us_per_mib'], s['free_mean_ms']))"
date -u
