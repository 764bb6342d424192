#!/usr/bin/env bash
# Call 15 (2026-12-04): issue 21 after the engine work and the unbind signals.
#
# Binaries (release, stripped), carried in .dev/:
#   .dev/wgpool-prev  fc1d0f2, call 14's build (before the engine work of issue 21)
#   .dev/wgpool       this session's build after it (the commit is printed below)
# Traces as in call 14: tests/data/gpt2-train.csv, and the synthetic stand-ins resnet50-amp,
# bert-base-varlen and kv-decode-cat made here by tools/synth_traces.py.
#
# Run with carry [".gl", ".dev"]. SCALE (default 1) and ADAPTER (default nvidia) for a dry run.
set -uo pipefail
SCALE=${SCALE:-1}
ADAPTER=${ADAPTER:-nvidia}
[ -n "${NO_DEBS:-}" ] || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
if ! .dev/wgpool info --adapter "$ADAPTER" > /dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
lscpu | grep -E "Model name" || true
cat .dev/COMMIT 2>/dev/null
mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces resnet50-amp bert-base-varlen kv-decode-cat > /dev/null
TRACES="gpt2-train resnet50-amp bert-base-varlen kv-decode-cat"
paths=$(for t in $TRACES; do printf '/tmp/traces/%s.csv ' "$t"; done)

echo "== the engine alone on the host CPU: default / policy:pytorch, call 14's build and now"
python3 tools/engine_cost.py --base .dev/wgpool-prev --rounds 3 .dev/wgpool $paths | tee "$OUT/engine-cost.md"

echo "== replay --gpu now, both modes: 5 runs with the cache released (cold), then kept (hot)"
: > "$OUT/replay.jsonl"
for round in 1 2; do
  for t in $TRACES; do
    for mode in True False; do
      for cache in released kept; do
        extra=""; [ $cache = kept ] && extra="--keep-cache"
        out=$(.dev/wgpool replay /tmp/traces/$t.csv --gpu --json --scale $SCALE --repeat 5 $extra --conf expandable_segments:$mode 2>/dev/null)
        python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$t'; r['round']=$round; r['cache']='$cache'
print(json.dumps(r))
m=r['rest_median']
print('$t', r['mode'], '$cache', 'first: wall %.3f drv %.3f pool %.0f ns/op; runs 2-5: replay %.3f drv %.3f pool %.0f ns/op binds %d allocs %d; engine %.0f ns/op; pool/engine %.2f; dev %.2f GB' % (r['wall_time_s'], r['driver_time_s'], r['pool_ns_per_op'], m['replay_time_s'], m['driver_time_s'], m['pool_ns_per_op'], m['bind_calls'], m['device_allocations'], r['engine_ns_per_op'], r['pool_over_engine'], r['device_memory_peak_bytes']/1e9), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl"
      done
    done
  done
done

echo "== churn and memory of the default (engine alone), and of compact_page_slack:0"
for t in $TRACES; do
  for conf in "" compact_page_slack:0; do
    .dev/wgpool replay /tmp/traces/$t.csv --json ${conf:+--conf $conf} 2>/dev/null |
      python3 -c "import json,sys; r=json.load(sys.stdin); l=r['peak_live_bytes']; print('$t', '${conf:-default}', 'ratio %.4f mapped %.3fx' % (r['ratio'], r['mapped_bytes_total']/l))"
  done
done
date -u
