#!/bin/bash
# H200 call 11 (2026-12-03, third session, build with the empty submission before each
# unbind counted as bind time): recycle_pipeline without kernels, and GPT-2 replay --gpu.
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan
date -u
show() { python3 -c "
import json; r=json.load(open('$1')); print(r['adapter'], 'kernels', r['kernels'], r['allocations'], 'allocations, live bound', r['live_bytes_bound'])
for x in r['runs']: print(x['round'], x['conf'] or '(default)', x['mode'], 'wall %.3f s' % x['wall_s'], 'driver %.3f s' % x['driver_time_s'], 'outside %.3f s' % (x['wall_s'] - x['driver_time_s']), 'binds', x['bind_calls'], 'orderings', x['wrapper_orderings'], 'ordering %.3f s' % x['ordering_s'])"; }
for live in 4096 1024; do
  .dev/recycle_pipeline --allocations 4000 --live-mib $live --rounds 2 --no-kernels > $OUT/pipeline_${live}_nok.json; show $OUT/pipeline_${live}_nok.json
done
for c in "" "expandable_segments:False"; do
  .dev/wgpool replay tests/data/gpt2-train.csv --gpu --json --conf "$c" | python3 -c "
import json,sys; r=json.load(sys.stdin); print('gpt2', r['conf'] or '(default)', r['mode'], 'driver', round(r['driver_time_s'],3), 'alloc', round(r['allocation_time_s'],3), 'bind', round(r['bind_time_s'],3), 'binds', r['bind_calls'])"
done
date -u
