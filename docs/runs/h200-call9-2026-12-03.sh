#!/bin/bash
# H200 call 9 (2026-12-03, third session): what recycling costs with GPU work in flight
# (examples/recycle_pipeline.rs): the default, compact_recycle_rate:0 and fixed segments,
# interleaved, at two scales.
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan
date -u
show() { python3 -c "
import json; r=json.load(open('$1')); print(r['adapter'], r['allocations'], 'allocations, live bound', r['live_bytes_bound'])
for x in r['runs']: print(x['round'], x['conf'] or '(default)', x['mode'], 'wall %.3f s' % x['wall_s'], 'device peak', x['device_bytes_peak'], 'live peak', x['peak_live_bytes'], 'driver %.3f s' % x['driver_time_s'], 'binds', x['bind_calls'], 'orderings', x['wrapper_orderings'], 'unmap wait %.3f' % x['unmap_wait_s'], 'allocs', x['allocations'], 'frees', x['frees'])"; }
.dev/recycle_pipeline --allocations 4000 --live-mib 4096 --rounds 2 > $OUT/pipeline_4g.json; show $OUT/pipeline_4g.json
.dev/recycle_pipeline --allocations 4000 --live-mib 1024 --rounds 3 > $OUT/pipeline_1g.json; show $OUT/pipeline_1g.json
date -u
