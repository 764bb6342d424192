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
# ONLY_TRACES="..." replays only those traces, NO_OLD=1 leaves b244e2c out, NO_PREV=1
# leaves 5dd1280 out.
# Carry [".gl", ".dev"]. (The heap-read figure of each line reads the report's
# `heap_query_s` where a build put it there, 99ac9fb, and the first run's otherwise; call 63
# ran with the second form alone, which printed the same for its builds.)
set -uo pipefail
ROUNDS=${ROUNDS:-3}
STOP_AT=${STOP_AT:-400}
. docs/runs/table-helper.sh
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
      [ -n "${NO_PREV:-}" ] || { wg $t $conf "--repeat 5" wgpool-prev; usable; }
    done
  done
done
# Added for call 65 (off unless asked): HOT=1, the hot path (`--repeat 9 --keep-cache`) of
# each trace and mode by this build; HEAP=1, one `--heap-watch` replay of each.
for t in ${HOT:+$TRACES}; do
  for conf in expandable_segments:True expandable_segments:False; do
    round=hot wg $t $conf "--repeat 9 --keep-cache" wgpool
  done
done
for t in ${HEAP:+$TRACES}; do
  for conf in expandable_segments:True expandable_segments:False; do
    round=heap wg $t $conf "--heap-watch" wgpool; usable
  done
done
[ -n "${SKIP_ENGINE:-}" ] && { date -u; exit 0; }
echo "== the engine alone on the host CPU: default / policy:pytorch, b244e2c and now (${SECONDS}s)"
timeout 100 python3 tools/engine_cost.py --base .dev/wgpool-old --rounds 2 .dev/wgpool \
  $(for t in $TRACES; do printf '/tmp/traces/%s.csv ' "$t"; done) | tee "$OUT/engine-cost.md"
date -u
