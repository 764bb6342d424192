#!/bin/bash
# H200 call 3 (2026-12-03, second session): vkAllocateMemory cost per call and per MiB, chunk
# policies on replay --gpu, and the checksum kernel on page-mapped blocks, repeated.
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan PYTHONUNBUFFERED=1
T=tests/data/gpt2-train.csv
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== alloc sweep + gpt2 policies"
P="--chunk-policy segments --chunk-policy 2,256,128,64,0 --chunk-policy 2,256,128,2048,1 --chunk-policy 32,256,128,2048,1 --chunk-policy 64,256,128,2048,1 --chunk-policy 128,256,128,2048,1"
.dev/page_costs --no-grow-dispatches --alloc-sweep --replay $T --rounds 3 $P > $OUT/costs_gpt2.json
python3 - $OUT/costs_gpt2.json <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))
for s in r['alloc_sweep']: print('sweep', s['chunk_bytes']>>10, 'KiB', 'q' if s['budget_query_between'] else '-', 'calls', s['calls'], 'mean %.3f med %.3f first %.3f last %.3f ms, %.2f us/MiB, free %.3f ms' % (s['mean_ms'], s['median_ms'], s['first_ms'], s['last_ms'], s['us_per_mib'], s['free_mean_ms']))
for x in r['replays']: print(x['round'], x['policy'], x['mode'], x['peak_reserved_bytes'], x['device_memory_peak_bytes'], '%.4f'%x['device_over_reserved'], 'driver %.3f alloc %.3f bind %.3f allocs %d binds %d' % (x['driver_time_s'], x['allocation_time_s'], x['bind_time_s'], x['device_allocations'], x['bind_calls']))
PY
for t in bert_varlen random_borders; do
  echo "== $t"
  .dev/page_costs --no-grow-dispatches --replay .dev/$t.csv --rounds 2 $P > $OUT/costs_$t.json
  python3 -c "
import json,sys
for x in json.load(open('$OUT/costs_$t.json'))['replays']: print(x['round'], x['policy'], x['mode'], x['peak_reserved_bytes'], x['device_memory_peak_bytes'], '%.4f'%x['device_over_reserved'], 'driver %.3f alloc %.3f bind %.3f allocs %d binds %d' % (x['driver_time_s'], x['allocation_time_s'], x['bind_time_s'], x['device_allocations'], x['bind_calls']))"
done
echo "== bench (pages default), full"
.dev/wgpool bench --json > $OUT/bench_full.json
show() { python3 -c "
import json; r=json.load(open('$1')); rows={}
for k in r['kernels']: rows.setdefault((k['name'],k['dtype']),{})[k['placement']]=k['gbps']
for key,v in rows.items(): print(key, {p:round(g,1) for p,g in v.items()}, 'pool/raw=%.4f'%(v['pool']/v['raw']))
print([p.get('memory_mode') for p in r.get('pools',[])])"; }
show $OUT/bench_full.json
for i in 1 2 3; do
  echo "== bench checksum+copy pages $i"; .dev/wgpool bench --kernels checksum_u32,copy_f32 --json > $OUT/bench_cs_pages_$i.json; show $OUT/bench_cs_pages_$i.json
  echo "== bench checksum+copy segments $i"; .dev/wgpool bench --kernels checksum_u32,copy_f32 --conf expandable_segments:False --json > $OUT/bench_cs_seg_$i.json; show $OUT/bench_cs_seg_$i.json
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
date -u
