#!/usr/bin/env bash
# Call 63 (2026-12-07, seventeenth session): issue 21's table with the heap read off the
# timed loop (8e29cd5: a watcher thread reads the heap's usage) and the first pool's
# creation without the owner bias's membarrier wait (5dd1280), against 5dd1280 itself, with
# PyTorch 2.11 and b244e2c (the build issue 21 was filed on) in the same call.
#
# Binaries (release, stripped), carried in .dev/:
#   .dev/wgpool-old   b244e2c (no --repeat: one run)
#   .dev/wgpool-prev  5dd1280 (heap read on the replaying thread)
#   .dev/wgpool       this session's build (.dev/COMMIT)
# For each of ROUNDS interleaved rounds (default 3) and each trace: PyTorch's caching
# allocator from C++ (native and expandable segments, `--repeat 5`), b244e2c in both modes,
# this build and 5dd1280 in both modes (`--repeat 5`). Rounds stop once STOP_AT seconds
# (default 400) have passed; then the engine alone (SKIP_ENGINE=1 leaves it out).
# ONLY_TRACES="..." replays only those traces, NO_OLD=1 leaves b244e2c out.
# Carry [".gl", ".dev"]. (The heap-read figure of each line reads the report's
# `heap_query_s` where a build put it there, 99ac9fb, and the first run's otherwise; call 63
# ran with the second form alone, which printed the same for its builds.)
set -uo pipefail
ROUNDS=${ROUNDS:-3}
STOP_AT=${STOP_AT:-400}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
nproc; lscpu | grep -E "Model name" || true
python3 -c "import torch; print('torch', torch.__version__)" 2>/dev/null
cat .dev/COMMIT .dev/COMMIT-prev
. docs/runs/prepare-traces.sh
TRACES=${ONLY_TRACES:-$TRACES}
. docs/runs/replay-helper.sh
: > "$OUT/torch.jsonl"
torch() {
  PYTORCH_CUDA_ALLOC_CONF=$2 timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 5 \
    2>/dev/null | python3 -c "
import json,sys
r=json.loads(sys.stdin.read()); r['round']='$round'
open('$OUT/torch.jsonl','a').write(json.dumps(r)+'\n')
print('$round torch $1 %s first %.3f s rest %.3f s' % (r['conf'] or 'native', r['first_s'], r['rest_median_s']))"
}
old() {
  out=$(timeout 90 .dev/wgpool-old replay /tmp/traces/$1.csv --gpu --json --conf "$2" 2>/dev/null)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']='$round'; r['conf_given']='$2'; r['args']=''; r['build']='wgpool-old'
print(json.dumps(r))
print('$round old $1 $2 wall %.3f drv %.3f dev %.3f GB' % (r['wall_time_s'], r['driver_time_s'], r['device_memory_peak_bytes']/1e9), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2 old: no report"
}
usable() {
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   loop %.3f (bind wait %.4f), heap queries %.4f s, wall %.3f; drv %.3f; dev %.3f GB, heap %.3f GB; device allocations %d' % (f['replay_time_s'] + f['bind_wait_s'], f['bind_wait_s'], r.get('heap_query_s', f.get('heap_query_s', 0)), r['wall_time_s'], f['driver_time_s'], r['device_memory_peak_bytes']/1e9, (r['heap_usage_peak_bytes'] or 0)/1e9, f['device_allocations']))"
}
for round in $(seq 1 "$ROUNDS"); do
  [ "$SECONDS" -lt "$STOP_AT" ] || { echo "round $round skipped at ${SECONDS}s"; break; }
  for t in $TRACES; do
    torch $t ""
    torch $t expandable_segments:True
    for conf in expandable_segments:True expandable_segments:False; do
      [ -n "${NO_OLD:-}" ] || old $t $conf
      wg $t $conf "--repeat 5" wgpool; usable
      wg $t $conf "--repeat 5" wgpool-prev; usable
    done
  done
done
[ -n "${SKIP_ENGINE:-}" ] && { date -u; exit 0; }
echo "== the engine alone on the host CPU: default / policy:pytorch, b244e2c and now (${SECONDS}s)"
timeout 100 python3 tools/engine_cost.py --base .dev/wgpool-old --rounds 2 .dev/wgpool \
  $(for t in $TRACES; do printf '/tmp/traces/%s.csv ' "$t"; done) | tee "$OUT/engine-cost.md"
date -u
