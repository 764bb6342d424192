#!/usr/bin/env bash
# Call 14 (2026-12-04): issue 21 before and after, and PyTorch in the same run; issue 23's
# capabilities on the H200.
#
# Binaries (release, stripped), carried in .dev/:
#   .dev/wgpool-old  b244e2c, the build issue 21 was filed on
#   .dev/wgpool      this session's build (the commit is printed below)
# Traces: tests/data/gpt2-train.csv (real), and three real-shaped synthetic stand-ins for the
# issue's held-out ResNet, BERT and Llama KV-decode traces, made here by
# tools/synth_traces.py (standard library only): resnet50-amp, bert-base-varlen,
# kv-decode-cat.
#
# Run with carry [".gl", ".dev"]; begins by unpacking the loaders. SCALE (default 1) divides
# every size and ADAPTER (default nvidia) picks the adapter, for a dry run on lavapipe.
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
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc; python3 -c "import torch; print('torch', torch.__version__)"
cat .dev/COMMIT 2>/dev/null

mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces resnet50-amp bert-base-varlen kv-decode-cat > /dev/null
TRACES="gpt2-train resnet50-amp bert-base-varlen kv-decode-cat"

echo "== issue 23: capabilities"
.dev/wgpool info --adapter "$ADAPTER" > "$OUT/info.txt"
sed -n '/capabilities/,/memory mode/p' "$OUT/info.txt"
.dev/wgpool info --adapter "$ADAPTER" --json > "$OUT/info.json"

echo "== issue 21: replay --gpu, old and new build, both modes, 3 interleaved rounds"
: > "$OUT/replay.jsonl"
for round in 1 2 3; do
  for t in $TRACES; do
    for mode in True False; do
      for build in old new; do
        if [ $build = old ]; then
          out=$(.dev/wgpool-old replay /tmp/traces/$t.csv --gpu --json --scale $SCALE --conf expandable_segments:$mode 2>/dev/null)
        else
          out=$(.dev/wgpool replay /tmp/traces/$t.csv --gpu --json --scale $SCALE --repeat 5 --conf expandable_segments:$mode 2>/dev/null)
        fi
        python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['build']='$build'; r['trace']='$t'; r['round']=$round
print(json.dumps(r))
ops=r['ops']; wall=r['wall_time_s']; drv=r['driver_time_s']
extra=''
if 'pool_ns_per_op' in r:
    m=r.get('rest_median') or {}
    extra=' pool %.0f ns/op engine %.0f ns/op (%.2fx) rest: replay %.3f drv %.3f pool %.0f ns/op orderings %d' % (r['pool_ns_per_op'], r['engine_ns_per_op'] or 0, r['pool_over_engine'] or 0, m.get('replay_time_s',0), m.get('driver_time_s',0), m.get('pool_ns_per_op',0), r['wrapper_orderings'])
print('$build', '$t', r['mode'], 'wall %.3f drv %.3f outside %.0f ns/op dev %.2f GB' % (wall, drv, (wall-drv-r['unmap_wait_s'])*1e9/ops, r['device_memory_peak_bytes']/1e9) + extra, file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl"
      done
    done
  done
done

echo "== issue 21: the engine alone on the host CPU, default and policy:pytorch"
for t in $TRACES; do
  for conf in "" policy:pytorch; do
    .dev/wgpool replay /tmp/traces/$t.csv --json ${conf:+--conf $conf} 2>/dev/null |
      python3 -c "import json,sys; r=json.load(sys.stdin); print('$t', '${conf:-default}', r['mode'], 'ns/op %.1f median %.1f ratio %.4f mapped/live %.2f' % (r['ns_per_op'], r['ns_per_op_median'], r['ratio'], r['mapped_bytes_total']/r['peak_live_bytes']))"
  done
done

echo "== PyTorch's caching allocator from C++ (raw_alloc / raw_delete), first run and the rest"
: > "$OUT/torch.jsonl"
for t in $TRACES; do
  for conf in "" expandable_segments:True; do
    PYTORCH_CUDA_ALLOC_CONF=$conf timeout 300 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$t.csv --repeat 5 --scale $SCALE \
      >> "$OUT/torch.jsonl" 2> "$OUT/torch-err.txt" || { echo "torch $t $conf failed"; tail -5 "$OUT/torch-err.txt"; }
    tail -1 "$OUT/torch.jsonl" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['trace'], r['conf'] or 'native', 'first %.3f s rest %.3f s (%.0f ns/op)' % (r['first_s'], r['rest_median_s'], r['ns_per_op_rest_median']))" 2>/dev/null
  done
done

echo "== bench --quick: the alloc rows (issue 21) and what it leaves out (issue 23)"
.dev/wgpool bench --quick --adapter "$ADAPTER" --json > "$OUT/bench-quick.json" 2>/dev/null
python3 -c "
import json,sys
r=json.load(open(sys.argv[1]))
print('omitted', r['omitted']); print('timing', r['timing'])
a=r['alloc']; print('cached %.0f ns vs create_buffer %.0f ns' % (a['pool_ns'], a['create_buffer_ns']))
for row in a['rows']: print(row)
" "$OUT/bench-quick.json"
date -u
