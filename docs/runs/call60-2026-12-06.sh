#!/usr/bin/env bash
# Call 60 (2026-12-06, fifteenth session): issue 21's table before and after in one call, with
# PyTorch 2.11 in the same call, and the wait for binds of the build before queued unmaps
# (call 59's question).
#
# Binaries (release, stripped), carried in .dev/:
#   .dev/wgpool-old   b244e2c, the build issue 21 was filed on (no --repeat: one run)
#   .dev/wgpool-prev  5fd2dc2 with the replay's `bind_wait_s` (maps queued, unmaps not)
#   .dev/wgpool       this session's build (.dev/COMMIT)
#   .dev/*_gpu        this build's GPU test binaries (`cargo test --release --no-run`)
# For each of ROUNDS interleaved rounds (default 3) and each trace: PyTorch's caching
# allocator from C++ (native and expandable segments, `--repeat 5`: first run and the median
# of the rest), b244e2c's replay in both modes, this build's (`--repeat 5`, cache released
# between runs) in both modes, and 5fd2dc2's in pages mode (`--repeat 3`). Rounds stop
# once STOP_AT seconds (default 400) have passed, so that the engine comparison and the
# NVIDIA tests still run. Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
STOP_AT=${STOP_AT:-400}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
nproc; lscpu | grep -E "Model name" || true
python3 -c "import torch; print('torch', torch.__version__)" 2>/dev/null
cat .dev/COMMIT .dev/COMMIT-prev
. docs/runs/prepare-traces.sh
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
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   wall %.3f + bind wait %.4f = %.3f s; drv %.3f; dev %.3f GB; rest replay %.3f' % (r['wall_time_s'], f['bind_wait_s'], r['wall_time_s'] + f['bind_wait_s'], f['driver_time_s'], r['device_memory_peak_bytes']/1e9, r['rest_median']['replay_time_s']))"
}
for round in $(seq 1 "$ROUNDS"); do
  [ "$SECONDS" -lt "$STOP_AT" ] || { echo "round $round skipped at ${SECONDS}s"; break; }
  for t in $TRACES; do
    torch $t ""
    torch $t expandable_segments:True
    old $t expandable_segments:True
    wg $t expandable_segments:True "--repeat 5" wgpool; usable
    wg $t expandable_segments:True "--repeat 3" wgpool-prev; usable
    old $t expandable_segments:False
    wg $t expandable_segments:False "--repeat 5" wgpool; usable
  done
done
echo "== the engine alone on the host CPU: default / policy:pytorch, b244e2c and now (${SECONDS}s)"
timeout 100 python3 tools/engine_cost.py --base .dev/wgpool-old --rounds 2 .dev/wgpool \
  $(for t in $TRACES; do printf '/tmp/traces/%s.csv ' "$t"; done) | tee "$OUT/engine-cost.md"
for t in sparse_gpu pool_gpu submissions_gpu residency_gpu; do
  echo "== $t (${SECONDS}s)"
  timeout 100 .dev/$t --test-threads 1 2>&1 | grep -E "^test result|FAILED|panicked" | head -12
done
date -u
