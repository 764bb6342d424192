#!/usr/bin/env bash
# Call 12: where pages mode's CPU time outside driver calls goes (build 3c7a420, which counts
# wrapper creation, range release and the wait before it), and the same with range release
# deferred until its binds are applied (the working tree after 3c7a420).
export WGPU_BACKEND=vulkan
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
summary() {
python3 - "$@" <<'PY'
import json, sys
for path in sys.argv[1:]:
    r = json.load(open(path))
    for x in r["runs"]:
        o = x["ops"]
        print(path.split("/")[-1], x["conf"] or "default", "wall %.3f drv %.3f wait %.3f ord %.3f range %.3f rel %d wrap %d unacc %.3f" % (
            x["wall_s"], x["driver_time_s"], x["unmap_wait_s"], x["ordering_s"], x["range_s"],
            x["ranges_released"], x["wrappers_created"], o["unaccounted_s"]),
            " ".join("%s:%d/%.3f/%.3f" % (k, o[k]["count"], o[k]["total_s"], o[k]["unaccounted_s"]) for k in ("quiet", "bind", "range", "wrapper")))
        print("   slowest:", [(s["op"], s["index"], round(s["total_s"]*1e3, 2), round(s["unaccounted_s"]*1e3, 2), s["bind_calls"], s["ranges"], s["wrappers"]) for s in o["slowest"][:5]])
PY
}
for round in 1 2; do
  for build in before after; do
    for live in 4096 1024; do
      f=$OUT/rp-$build-$live-r$round.json
      .dev/recycle_$build --no-kernels --allocations 4000 --live-mib $live --rounds 1 \
        --conf "" --conf expandable_segments:False > $f 2>/dev/null
      summary $f
    done
  done
done
for conf in "" "expandable_segments:False"; do
  .dev/wgpool replay tests/data/gpt2-train.csv --gpu --json --conf "$conf" > $OUT/gpt2-$([ -z "$conf" ] && echo pages || echo segments).json 2>/dev/null
done
python3 - $OUT/gpt2-pages.json $OUT/gpt2-segments.json <<'PY'
import json, sys
for p in sys.argv[1:]:
    r = json.load(open(p))
    print(p.split("/")[-1], {k: r[k] for k in ("mode", "wall_time_s", "driver_time_s", "allocation_time_s", "bind_time_s", "range_time_s", "unmap_wait_s", "wrappers_created", "device_memory_peak_bytes", "bind_calls")})
PY
