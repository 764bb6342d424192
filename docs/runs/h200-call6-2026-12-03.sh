#!/bin/bash
# H200 call 6 (2026-12-03): wgpool bench with interleaved placements (build 45e385d).
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
show() { python3 -c "
import json; r=json.load(open('$1')); rows={}
for k in r['kernels']: rows.setdefault((k['name'],k['dtype']),{})[k['placement']]=k['gbps']
for key,v in rows.items(): print(key, {p:round(g,1) for p,g in v.items()}, 'pool/raw=%.4f'%(v['pool']/v['raw']))
print([p.get('memory_mode') for p in r.get('pools',[])], r['timed_runs'], r['timing'])"; }
for i in 1 2; do echo "== bench full $i"; .dev/wgpool bench --json > $OUT/bench_full_$i.json; show $OUT/bench_full_$i.json; date -u; done
for i in 1 2 3; do echo "== bench checksum $i"; .dev/wgpool bench --kernels checksum_u32 --runs 30 --json > $OUT/bench_cs_$i.json; show $OUT/bench_cs_$i.json; done
echo "== bench segments"; .dev/wgpool bench --conf expandable_segments:False --json > $OUT/bench_seg.json; show $OUT/bench_seg.json
date -u
