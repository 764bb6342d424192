#!/bin/bash
# H200 call 2 (2026-12-03): the pool's own dispatch layout, replay --gpu repeated in both modes, bench, snapshot.
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan PYTHONUNBUFFERED=1
T=tests/data/gpt2-train.csv
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
.dev/wgpool info 2>&1 | grep -i "memory mode\|adapter 0"
echo "== page_costs"; .dev/page_costs --grow-mib 1024 --dispatches 1000 > $OUT/page_costs.json; cat $OUT/page_costs.json
echo "== replay --gpu alternating"
for round in 1 2 3; do
  for c in "" "expandable_segments:False"; do
    .dev/wgpool replay $T --gpu --json --conf "$c" | python3 -c "import json,sys; r=json.load(sys.stdin); r['round']=$round; print(json.dumps(r))" >> $OUT/replay_gpu.jsonl
  done
done
.dev/wgpool replay $T --gpu --json --conf policy:pytorch,expandable_segments:True | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" >> $OUT/replay_gpu.jsonl
.dev/wgpool replay $T --gpu --json --conf policy:pytorch | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" >> $OUT/replay_gpu.jsonl
python3 -c "
import json
for l in open('$OUT/replay_gpu.jsonl'):
    r=json.loads(l); print(r.get('round'), r['conf'] or '(default)', r['mode'], r['peak_reserved_bytes'], r['device_memory_peak_bytes'], round(r['device_over_reserved'],4), r['heap_usage_peak_bytes'], 'driver', round(r['driver_time_s'],3), 'alloc', round(r['allocation_time_s'],3), 'bind', round(r['bind_time_s'],3), 'allocs', r['device_allocations'], 'frees', r['device_frees'], 'binds', r['bind_calls'], 'wall', round(r['wall_time_s'],3))
"
echo "== snapshot"
.dev/wgpool replay $T --snapshot /tmp/pages.pickle --json > /dev/null && python3 tools/check_snapshot.py /tmp/pages.pickle --require-torch 2>&1 | grep -v runpy
python3 -m torch.cuda._memory_viz stats /tmp/pages.pickle 2>&1 | grep -v runpy | head -8
echo "== bench"; .dev/wgpool bench --json > $OUT/bench.json; python3 -c "
import json; r=json.load(open('$OUT/bench.json')); rows={}
for k in r['kernels']: rows.setdefault((k['name'],k['dtype']),{})[k['placement']]=k['gbps']
for key,v in rows.items(): print(key, {p:round(g,1) for p,g in v.items()}, 'pool/raw=%.4f'%(v['pool']/v['raw']))
print({k:v for k,v in r.items() if k not in ('kernels',)})"
ls -la $OUT
