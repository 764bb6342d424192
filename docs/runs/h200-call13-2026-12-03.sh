#!/usr/bin/env bash
# Call 13: the time after the last allocation (dropping the blocks still live, then the final
# wait for the GPU), beside the operations' own time, with and without kernels (build
# 180908c plus drop_rest_s and final_wait_s in recycle_pipeline).
export WGPU_BACKEND=vulkan
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
summary() {
python3 - "$@" <<'PY'
import json, sys
for path in sys.argv[1:]:
    r = json.load(open(path))
    for x in r["runs"]:
        o = x["ops"]
        ops = sum(o[k]["total_s"] for k in ("quiet", "bind", "range", "wrapper"))
        print(path.split("/")[-1], x["round"], x["conf"] or "default", "wall %.3f ops %.3f drop_rest %.3f final_wait %.3f drv %.3f binds %d unacc %.3f dev %.2fGB" % (
            x["wall_s"], ops, x["drop_rest_s"], x["final_wait_s"], x["driver_time_s"], x["bind_calls"], o["unaccounted_s"], x["device_bytes_peak"] / 1e9))
PY
}
for live in 4096 1024; do
  f=$OUT/rp-nok-$live.json
  .dev/recycle_after --no-kernels --allocations 4000 --live-mib $live --rounds 2 \
    --conf "" --conf compact_recycle_rate:0 --conf expandable_segments:False > $f 2>/dev/null
  summary $f
  f=$OUT/rp-k-$live.json
  .dev/recycle_after --allocations 4000 --live-mib $live --rounds 1 \
    --conf "" --conf compact_recycle_rate:0 --conf expandable_segments:False > $f 2>/dev/null
  summary $f
done
