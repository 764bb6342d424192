#!/usr/bin/env bash
# Call 21 (2026-12-05): issue 21's replay table before and after the record shelf and the
# spare-page change, with PyTorch's caching allocator in the same call.
#
# Binaries (release, stripped), carried in .dev/:
#   .dev/wgpool-prev  cadf07e, the session's starting build
#   .dev/wgpool       this session's build (the commit is in .dev/COMMIT)
# Traces: tests/data/gpt2-train.csv and the synthetic stand-ins resnet50-amp,
# bert-base-varlen and kv-decode-cat made by tools/synth_traces.py (as in calls 14-20).
#
# Run with carry [".gl", ".dev"]. SCALE (default 1), ADAPTER (default nvidia) and ROUNDS
# (default 1) for a dry run; BUILDS (default "prev now") and CACHES (default "released kept")
# to run fewer replays, TRACES to name fewer traces, ENGINE_COST=0 to leave out the
# engine-alone comparison.
set -uo pipefail
SCALE=${SCALE:-1}
ADAPTER=${ADAPTER:-nvidia}
ROUNDS=${ROUNDS:-1}
BUILDS=${BUILDS:-prev now}
CACHES=${CACHES:-released kept}
ENGINE_COST=${ENGINE_COST:-1}
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
TRACES=${TRACES:-gpt2-train resnet50-amp bert-base-varlen kv-decode-cat}
paths=$(for t in $TRACES; do printf '/tmp/traces/%s.csv ' "$t"; done)

echo "== PyTorch's caching allocator from C++ (raw_alloc / raw_delete), first run and the rest"
: > "$OUT/torch.jsonl"
for t in $TRACES; do
  for conf in "" expandable_segments:True; do
    PYTORCH_CUDA_ALLOC_CONF=$conf timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$t.csv --repeat 5 --scale $SCALE \
      >> "$OUT/torch.jsonl" 2> "$OUT/torch-err.txt" || { echo "torch $t $conf failed"; tail -5 "$OUT/torch-err.txt"; }
    tail -1 "$OUT/torch.jsonl" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['trace'], r['conf'] or 'native', 'first %.3f s rest %.3f s (%.0f ns/op)' % (r['first_s'], r['rest_median_s'], r['ns_per_op_rest_median']))" 2>/dev/null
  done
done

echo "== replay --gpu, before (prev) and after (now), both modes: 5 runs, cache released (cold) or kept (hot)"
: > "$OUT/replay.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for t in $TRACES; do
    for mode in True False; do
      for cache in $CACHES; do
        for build in $BUILDS; do
          binary=.dev/wgpool; [ "$build" = prev ] && binary=.dev/wgpool-prev
          extra=""; [ $cache = kept ] && extra="--keep-cache"
          out=$(timeout 60 $binary replay /tmp/traces/$t.csv --gpu --json --scale $SCALE --repeat 5 $extra --conf "expandable_segments:$mode" 2>/dev/null)
          python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$t'; r['round']=$round; r['cache']='$cache'; r['build']='$build'
print(json.dumps(r))
m=r['rest_median']
print('$build', '$t', r['mode'], '$cache', 'first: wall %.3f drv %.3f pool %.0f ns/op; runs 2-5: replay %.3f drv %.3f pool %.0f ns/op binds %d; engine %.0f ns/op; pool/engine %.2f; dev %.3f GB' % (r['wall_time_s'], r['driver_time_s'], r['pool_ns_per_op'], m['replay_time_s'], m['driver_time_s'], m['pool_ns_per_op'], m['bind_calls'], r['engine_ns_per_op'], r['pool_over_engine'], r['device_memory_peak_bytes']/1e9), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$build $t $mode $cache: no report"
        done
      done
    done
  done
done

[ "$ENGINE_COST" = 0 ] || {
echo "== the engine alone on the host CPU: default / policy:pytorch, before and after"
timeout 120 python3 tools/engine_cost.py --base .dev/wgpool-prev --rounds 2 .dev/wgpool $paths | tee "$OUT/engine-cost.md"
}
date -u
