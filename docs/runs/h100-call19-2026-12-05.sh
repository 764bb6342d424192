#!/usr/bin/env bash
# Call 19 (2026-12-05, fourth session; run twice: 19a with SIZES="256 64" at 9c6a0e1, 19b
# with SIZES=256 after the headroom's target was fixed): issue 22's stream with evictions ahead of need
# (`residency_ahead`) beside the other strategies, blocks of 256 and 64 MiB under a 4 GiB
# budget. Binaries in .dev/ (commit in .dev/COMMIT); carry [".gl", ".dev"].
set -uo pipefail
[ -n "${NO_DEBS:-}" ] || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
ADAPTER=${ADAPTER:-nvidia}
if ! .dev/wgpool info --adapter "$ADAPTER" > /dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT 2>/dev/null
for size in ${SIZES:-256 64}; do
  echo "== bench --oversubscription, $size MiB blocks, 4 GiB budget"
  timeout 280 .dev/wgpool bench --adapter "$ADAPTER" --kernels copy_f32 --oversubscription --size-mb $size --budget-mb 4096 --json \
    > "$OUT/oversubscription-$size.json" 2> "$OUT/oversubscription-$size-err.txt" || echo "failed: $(tail -3 "$OUT/oversubscription-$size-err.txt")"
  python3 - "$OUT/oversubscription-$size.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["oversubscription"]
print("link h2d %.1f d2h %.1f GB/s, prefetch %.1f offload %.1f" % (d["host_to_device_gbps"], d["device_to_host_gbps"], d["prefetch_gbps"], d["offload_gbps"]))
for r in d["stream"]:
    print("stream %-19s %.1fx %7.1f GB/s  %.3f of link  in %.1f out %.1f GB/s  evictions %s ahead %s" % (r["strategy"], r["working_set_over_budget"], r["effective_gbps"], r["over_host_to_device"], r["to_device_gbps"], r["to_host_gbps"], r.get("evictions"), r.get("ahead_evictions")))
for r in d["hot_set"]:
    print("hot    %-19s %.3f of in_budget, moved %d" % (r["strategy"], r["over_in_budget"], r["moved_bytes"]))
print("verified", d["verified"])
PY
done
date -u
