#!/usr/bin/env bash
# Call 17 (2026-12-05): issue 21 before and after this session's work, PyTorch in the same run,
# and issue 22's oversubscription bench with the final bench build.
#
# Binaries (release, stripped), carried in .dev/:
#   .dev/wgpool-prev  6b00b21, the session's starting build
#   .dev/wgpool       this session's build (the commit is in .dev/COMMIT)
#   .dev/oversubscribe  the example, this session's build
# Traces: tests/data/gpt2-train.csv, and the synthetic stand-ins resnet50-amp,
# bert-base-varlen and kv-decode-cat made here by tools/synth_traces.py (as in calls 14, 15).
# RESERVE_CONF: the configuration that turns the page reserve off (empty: not measured).
#
# Run with carry [".gl", ".dev"]. SCALE (default 1) and ADAPTER (default nvidia) for a dry run.
# PART=replay runs the replays and the engine alone; PART=rest PyTorch and issue 22 (two calls
# of under ten minutes each); unset, both.
set -uo pipefail
SCALE=${SCALE:-1}
ADAPTER=${ADAPTER:-nvidia}
RESERVE_OFF=${RESERVE_OFF:-}
[ -n "${NO_DEBS:-}" ] || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
PART=${PART:-all}
exec > >(tee "$OUT/log-$PART.txt") 2>&1
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

if [ "$PART" != rest ]; then
echo "== replay --gpu, before (prev) and after (now), both modes: 5 runs, cache released (cold) or kept (hot)"
: > "$OUT/replay.jsonl"
for round in 1 2; do
  for t in $TRACES; do
    for mode in True False; do
      for cache in released kept; do
        for build in prev now ${RESERVE_OFF:+now-noreserve}; do
          [ "$build" = now-noreserve ] && [ "$mode" = False ] && continue
          binary=.dev/wgpool; [ "$build" = prev ] && binary=.dev/wgpool-prev
          conf="expandable_segments:$mode"; [ "$build" = now-noreserve ] && conf="$conf,$RESERVE_OFF"
          extra=""; [ $cache = kept ] && extra="--keep-cache"
          out=$($binary replay /tmp/traces/$t.csv --gpu --json --scale $SCALE --repeat 5 $extra --conf "$conf" 2>/dev/null)
          python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$t'; r['round']=$round; r['cache']='$cache'; r['build']='$build'
print(json.dumps(r))
m=r['rest_median']
print('$build', '$t', r['mode'], '$cache', 'first: wall %.3f drv %.3f pool %.0f ns/op; runs 2-5: replay %.3f drv %.3f pool %.0f ns/op binds %d allocs %d; engine %.0f ns/op; pool/engine %.2f; dev %.3f GB' % (r['wall_time_s'], r['driver_time_s'], r['pool_ns_per_op'], m['replay_time_s'], m['driver_time_s'], m['pool_ns_per_op'], m['bind_calls'], m['device_allocations'], r['engine_ns_per_op'], r['pool_over_engine'], r['device_memory_peak_bytes']/1e9), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl"
        done
      done
    done
  done
done

echo "== the engine alone on the host CPU: default / policy:pytorch, before and after"
python3 tools/engine_cost.py --base .dev/wgpool-prev --rounds 3 .dev/wgpool $paths | tee "$OUT/engine-cost.md"
fi
[ "$PART" = replay ] && { date -u; exit 0; }

echo "== PyTorch's caching allocator from C++ (raw_alloc / raw_delete), first run and the rest"
: > "$OUT/torch.jsonl"
for t in $TRACES; do
  for conf in "" expandable_segments:True; do
    PYTORCH_CUDA_ALLOC_CONF=$conf timeout 300 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$t.csv --repeat 5 --scale $SCALE \
      >> "$OUT/torch.jsonl" 2> "$OUT/torch-err.txt" || { echo "torch $t $conf failed"; tail -5 "$OUT/torch-err.txt"; }
    tail -1 "$OUT/torch.jsonl" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['trace'], r['conf'] or 'native', 'first %.3f s rest %.3f s (%.0f ns/op)' % (r['first_s'], r['rest_median_s'], r['ns_per_op_rest_median']))" 2>/dev/null
  done
done

echo "== issue 22: bench --oversubscription (link baseline in the same run), and the example"
for size in 256 1024; do
  budget=4096; [ $size = 1024 ] && budget=16384
  timeout 240 .dev/wgpool bench --adapter "$ADAPTER" --kernels copy_f32 --oversubscription --size-mb $size --budget-mb $budget --json \
    > "$OUT/oversubscription-$size.json" 2> "$OUT/oversubscription-$size-err.txt" || echo "oversubscription $size failed: $(tail -3 "$OUT/oversubscription-$size-err.txt")"
  python3 -c "
import json,sys
r=json.load(open(sys.argv[1]))['oversubscription']
print(json.dumps(r)[:3000])
" "$OUT/oversubscription-$size.json" 2>/dev/null
done
timeout 240 .dev/oversubscribe --layers 64 --width 4096 --batch 8 --passes 3 --json > "$OUT/oversubscribe.json" 2> "$OUT/oversubscribe-err.txt"
echo "oversubscribe exit $?"; cat "$OUT/oversubscribe.json"
date -u
