#!/usr/bin/env bash
# Call 18 (2026-12-05, fourth session): issue 22's stream with declared copies
# (`residency_declared`: read-only sources, discarded outputs) beside the other strategies,
# the example with read-only and writable weights, and issue 21's page reserve measured with
# more rounds (page_reserve_chunks 1, the default, against 0), first runs and the rest.
#
# Binaries (release, stripped), carried in .dev/: wgpool, oversubscribe (the commit is in
# .dev/COMMIT). Run with carry [".gl", ".dev"].
set -uo pipefail
[ -n "${NO_DEBS:-}" ] || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
ADAPTER=${ADAPTER:-nvidia}
ROUNDS=${ROUNDS:-3}
if ! .dev/wgpool info --adapter "$ADAPTER" > /dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
cat .dev/COMMIT 2>/dev/null

echo "== issue 22: bench --oversubscription, 256 MiB blocks, 4 GiB budget"
timeout 300 .dev/wgpool bench --adapter "$ADAPTER" --kernels copy_f32 --oversubscription --size-mb 256 --budget-mb 4096 --json \
  > "$OUT/oversubscription-256.json" 2> "$OUT/oversubscription-256-err.txt" || echo "failed: $(tail -3 "$OUT/oversubscription-256-err.txt")"
python3 - "$OUT/oversubscription-256.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["oversubscription"]
print("link h2d %.1f d2h %.1f GB/s, prefetch %.1f offload %.1f" % (d["host_to_device_gbps"], d["device_to_host_gbps"], d["prefetch_gbps"], d["offload_gbps"]))
for r in d["stream"]:
    print("stream %-19s %.1fx %7.1f GB/s  %.3f of link  in %.1f out %.1f GB/s" % (r["strategy"], r["working_set_over_budget"], r["effective_gbps"], r["over_host_to_device"], r["to_device_gbps"], r["to_host_gbps"]))
for r in d["hot_set"]:
    print("hot    %-19s %.3f of in_budget, moved %d" % (r["strategy"], r["over_in_budget"], r["moved_bytes"]))
print("verified", d["verified"])
PY

echo "== the example, read-only weights (default) and writable"
for flag in "" --writable-weights; do
  timeout 200 .dev/oversubscribe --layers 64 --width 4096 --batch 8 --passes 3 $flag --json > "$OUT/oversubscribe$flag.json" 2> "$OUT/oversubscribe-err.txt"
  echo "exit $? $flag"; cat "$OUT/oversubscribe$flag.json"
done

echo "== issue 21: the page reserve, chunks 1 (default) against 0, pages mode, cache released"
mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces resnet50-amp bert-base-varlen kv-decode-cat > /dev/null
: > "$OUT/reserve.jsonl"
for round in $(seq "$ROUNDS"); do
  for t in gpt2-train resnet50-amp bert-base-varlen kv-decode-cat; do
    for conf in expandable_segments:True,page_reserve_chunks:1 expandable_segments:True,page_reserve_chunks:0 expandable_segments:False; do
      out=$(timeout 60 .dev/wgpool replay /tmp/traces/$t.csv --gpu --json --repeat 5 --conf "$conf" 2>/dev/null)
      python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$t'; r['round']=$round; r['conf']='$conf'
print(json.dumps(r))
m=r['rest_median']
print('$t', '$conf', 'first wall %.3f drv %.3f; rest replay %.3f pool %.0f ns/op; dev %.3f GB' % (r['wall_time_s'], r['driver_time_s'], m['replay_time_s'], m['pool_ns_per_op'], r['device_memory_peak_bytes']/1e9), file=sys.stderr)
" "$out" >> "$OUT/reserve.jsonl"
    done
  done
done
date -u
