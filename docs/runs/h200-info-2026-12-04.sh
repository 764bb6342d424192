#!/usr/bin/env bash
# H200 info (issue 23, 2026-12-04): what `wgpool info` reports as the pool's capabilities on
# the H200, to confirm the H200 column of README's backend table (page_mapping, host_overflow,
# timestamps, f16, memory_heaps, memory_budget, binding_limits), and what the bench leaves
# out there (expected: nothing). Build: `cargo build --release` of branch issue-23, binary at
# .dev/wgpool. About 1 minute.
set -uo pipefail
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
git log --oneline -1 2>/dev/null || true

echo "== wgpool info --adapter nvidia"
.dev/wgpool info --adapter nvidia
.dev/wgpool info --adapter nvidia --json > "$OUT/info.json"

echo "== the table's cells, from info --json"
python3 - "$OUT/info.json" <<'PY'
import json, sys
for a in json.load(open(sys.argv[1]))["adapters"]:
    caps = a["capabilities"]
    print(a["name"], a["driver_info"], "backend", caps["backend"])
    for key in ("page_mapping", "host_overflow", "timestamps", "f16", "memory_heaps", "memory_budget"):
        c = caps[key]
        print("  %-14s %-4s %s" % (key, "yes" if c["available"] else "no", c.get("via") or c.get("reason")))
    b = caps["binding_limits"]
    print("  binding_limits %d / %d / %d B / %d" % (b["max_buffer_size"], b["max_storage_buffer_binding_size"],
          b["min_storage_buffer_offset_alignment"], b["max_storage_buffers_per_shader_stage"]))
    print("  page_mapping (info):", a["page_mapping"])
PY

echo "== bench --quick: what it leaves out (expected: [])"
.dev/wgpool bench --quick --adapter nvidia --json > "$OUT/bench-quick.json"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('omitted', r['omitted']); print('timing', r['timing'], r['moves']['timing']); print('pools', r['pools'])" "$OUT/bench-quick.json"

echo "== the same adapter through wgpu's GL backend (NVIDIA's EGL), if it has one: for the record"
WGPU_BACKEND=gl timeout 60 .dev/wgpool info || echo "(no GL adapter: rc=$?)"
