#!/bin/bash
# H200 call 10 (2026-12-03, third session): examples/recycle_pipeline.rs with and without
# kernels, to tell the pool's own time from its interplay with GPU work in flight (run twice:
# the second build also reports ordering_s).
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan
date -u
show() { python3 -c "
import json; r=json.load(open('$1')); print(r['adapter'], 'kernels', r['kernels'], r['allocations'], 'allocations, live bound', r['live_bytes_bound'])
for x in r['runs']: print(x['round'], x['conf'] or '(default)', x['mode'], 'wall %.3f s' % x['wall_s'], 'device peak', x['device_bytes_peak'], 'driver %.3f s' % x['driver_time_s'], 'binds', x['bind_calls'], 'orderings', x['wrapper_orderings'], 'ordering %.3f s' % x.get('ordering_s', float('nan')), 'allocs', x['allocations'], 'frees', x['frees'])"; }
for live in 4096 1024; do
  .dev/recycle_pipeline --allocations 4000 --live-mib $live --rounds 2 --no-kernels > $OUT/pipeline_${live}_nok.json; show $OUT/pipeline_${live}_nok.json
  .dev/recycle_pipeline --allocations 4000 --live-mib $live --rounds 2 > $OUT/pipeline_${live}_k.json; show $OUT/pipeline_${live}_k.json
done
date -u
