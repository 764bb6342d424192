#!/bin/bash
# H200 call 5 (2026-12-03, second session): chunk policy and spare binds on replay --gpu;
# the official replay --gpu rounds; vkAllocateMemory sweep; page_costs; bench.
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan
T=tests/data/gpt2-train.csv
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
show_costs() { python3 - "$1" <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))
for s in r.get('alloc_sweep') or []: print('sweep', s['chunk_bytes']>>10, 'KiB', 'q' if s['budget_query_between'] else '-', 'calls', s['calls'], 'mean %.3f med %.3f first %.3f last %.3f ms, %.2f us/MiB, free %.3f ms' % (s['mean_ms'], s['median_ms'], s['first_ms'], s['last_ms'], s['us_per_mib'], s['free_mean_ms']))
for x in r.get('replays') or []: print(x['round'], x['policy'], x['mode'], x['peak_reserved_bytes'], x['device_memory_peak_bytes'], '%.4f'%x['device_over_reserved'], 'driver %.3f alloc %.3f bind %.3f allocs %d binds %d' % (x['driver_time_s'], x['allocation_time_s'], x['bind_time_s'], x['device_allocations'], x['bind_calls']))
PY
}
P="--chunk-policy segments --chunk-policy 2,256,128,64,0,0,0 --chunk-policy 2,256,128,2048,1,2048,0 --chunk-policy 2,256,128,2048,1,2048,1"
echo "== gpt2 policies + sweep"
.dev/page_costs --no-grow-dispatches --alloc-sweep --replay $T --rounds 3 $P > $OUT/costs_gpt2.json; show_costs $OUT/costs_gpt2.json
for t in bert_varlen random_borders; do
  echo "== $t"; .dev/page_costs --no-grow-dispatches --replay .dev/$t.csv --rounds 2 $P > $OUT/costs_$t.json; show_costs $OUT/costs_$t.json
done
echo "== replay --gpu alternating"
for round in 1 2 3; do
  for c in "" "expandable_segments:False"; do
    .dev/wgpool replay $T --gpu --json --conf "$c" | python3 -c "import json,sys; r=json.load(sys.stdin); r['round']=$round; print(json.dumps(r))" >> $OUT/replay_gpu.jsonl
  done
done
.dev/wgpool replay $T --gpu --json --conf policy:pytorch,expandable_segments:True | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" >> $OUT/replay_gpu.jsonl
python3 -c "
import json
for l in open('$OUT/replay_gpu.jsonl'):
    r=json.loads(l); print(r.get('round'), r['conf'] or '(default)', r['mode'], r['peak_reserved_bytes'], r['device_memory_peak_bytes'], round(r['device_over_reserved'],4), r['heap_usage_peak_bytes'], 'driver', round(r['driver_time_s'],3), 'alloc', round(r['allocation_time_s'],3), 'bind', round(r['bind_time_s'],3), 'allocs', r['device_allocations'], 'frees', r['device_frees'], 'binds', r['bind_calls'], 'wall', round(r['wall_time_s'],3))
"
echo "== page_costs"; .dev/page_costs --grow-mib 1024 --dispatches 1000 > $OUT/page_costs.json; python3 -c "
import json; r=json.load(open('$OUT/page_costs.json')); print(json.dumps(r['grow'])); d=r['dispatches']; print({k:v for k,v in d.items() if k.endswith('_us') or k.endswith('separate')})"
echo "== bench full"; .dev/wgpool bench --json > $OUT/bench_full.json
show() { python3 -c "
import json; r=json.load(open('$1')); rows={}
for k in r['kernels']: rows.setdefault((k['name'],k['dtype']),{})[k['placement']]=k['gbps']
for key,v in rows.items(): print(key, {p:round(g,1) for p,g in v.items()}, 'pool/raw=%.4f'%(v['pool']/v['raw']))
print([p.get('memory_mode') for p in r.get('pools',[])])"; }
show $OUT/bench_full.json
for i in 1 2 3; do echo "== bench checksum pages $i"; .dev/wgpool bench --kernels checksum_u32 --json > $OUT/bench_cs_$i.json; show $OUT/bench_cs_$i.json; done
date -u
