#!/usr/bin/env bash
# Call 65 (2026-12-07, eighteenth session): issue 21's table before and after in one call,
# with PyTorch 2.11 in the same rounds: b244e2c (.dev/wgpool-old, the build the issue was
# filed on, one run) against this session's build (.dev/wgpool, .dev/COMMIT, `--repeat 5`),
# both modes, interleaved rounds (ROUNDS, default 3) until STOP_AT seconds (default 330);
# then one `--repeat 9 --keep-cache` replay of each trace and mode by this build (the hot
# path: pool over engine with cached memory), one `--heap-watch` replay of each (the heap's
# usage beside the pool's own peak), then the engine alone against b244e2c (SKIP_ENGINE=1
# leaves it out). ONLY_TRACES="..." replays only those. Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
STOP_AT=${STOP_AT:-330}
. docs/runs/table-helper.sh
usable() {
  tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   loop %.3f (bind wait %.4f), heap queries %.4f s, wall %.3f; drv %.3f; dev %.3f GB, heap %.3f GB; device allocations %d' % (f['replay_time_s'] + f['bind_wait_s'], f['bind_wait_s'], f.get('heap_query_s', 0), r['wall_time_s'], f['driver_time_s'], r['device_memory_peak_bytes']/1e9, (r['heap_usage_peak_bytes'] or 0)/1e9, f['device_allocations']))"
}
for round in $(seq 1 "$ROUNDS"); do
  [ "$SECONDS" -lt "$STOP_AT" ] || { echo "round $round skipped at ${SECONDS}s"; break; }
  for t in $TRACES; do
    torch $t ""
    torch $t expandable_segments:True
    for conf in expandable_segments:True expandable_segments:False; do
      old $t $conf
      wg $t $conf "--repeat 5" wgpool; usable
    done
  done
done
round=hot
for t in $TRACES; do
  for conf in expandable_segments:True expandable_segments:False; do
    wg $t $conf "--repeat 9 --keep-cache" wgpool
  done
done
round=heap
for t in $TRACES; do
  for conf in expandable_segments:True expandable_segments:False; do
    wg $t $conf "--heap-watch" wgpool; usable
  done
done
[ -n "${SKIP_ENGINE:-}" ] && { date -u; exit 0; }
echo "== the engine alone on the host CPU: default / policy:pytorch, b244e2c and now (${SECONDS}s)"
timeout 100 python3 tools/engine_cost.py --base .dev/wgpool-old --rounds 2 .dev/wgpool \
  $(for t in $TRACES; do printf '/tmp/traces/%s.csv ' "$t"; done) | tee "$OUT/engine-cost.md"
date -u
