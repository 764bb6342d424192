#!/usr/bin/env bash
# Call 62 (2026-12-07, sixteenth session): segments mode's shared idle segment (9f6bf21)
# against the build before it (f46465e) on issue 21's four traces, with PyTorch 2.11 and
# b244e2c (the build issue 21 was filed on) in the same call: issue 21's table again.
#
# Binaries (release, stripped), carried in .dev/:
#   .dev/wgpool-old   b244e2c (no --repeat: one run)
#   .dev/wgpool-prev  f46465e, the fifteenth session's end
#   .dev/wgpool       this session's build (.dev/COMMIT)
# For each of ROUNDS interleaved rounds (default 3) and each trace: PyTorch's caching
# allocator from C++ (native and expandable segments, `--repeat 5`), b244e2c in both modes,
# this build in both modes (`--repeat 5`), and f46465e in segments mode (`--repeat 5`; its
# pages mode is this build's). Rounds stop once STOP_AT seconds (default 420) have passed,
# so that the engine comparison still runs (SKIP_ENGINE=1 leaves it out). ONLY_TRACES="..."
# replays only those traces, NO_OLD=1 leaves b244e2c out. Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
STOP_AT=${STOP_AT:-420}
. docs/runs/table-helper.sh
usable() {
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   wall to binds applied %.3f; drv %.3f; dev %.3f GB; segments %d device allocations %d' % (r['wall_time_s'], f['driver_time_s'], r['device_memory_peak_bytes']/1e9, r['segments_created'], r['device_allocations']))"
}
for round in $(seq 1 "$ROUNDS"); do
  [ "$SECONDS" -lt "$STOP_AT" ] || { echo "round $round skipped at ${SECONDS}s"; break; }
  for t in $TRACES; do
    torch $t ""
    torch $t expandable_segments:True
    [ -n "${NO_OLD:-}" ] || old $t expandable_segments:True
    wg $t expandable_segments:True "--repeat 5" wgpool; usable
    [ -n "${NO_OLD:-}" ] || old $t expandable_segments:False
    wg $t expandable_segments:False "--repeat 5" wgpool; usable
    wg $t expandable_segments:False "--repeat 5" wgpool-prev; usable
  done
done
[ -n "${SKIP_ENGINE:-}" ] && { date -u; exit 0; }
echo "== the engine alone on the host CPU: default / policy:pytorch, b244e2c and now (${SECONDS}s)"
timeout 100 python3 tools/engine_cost.py --base .dev/wgpool-old --rounds 2 .dev/wgpool \
  $(for t in $TRACES; do printf '/tmp/traces/%s.csv ' "$t"; done) | tee "$OUT/engine-cost.md"
date -u
