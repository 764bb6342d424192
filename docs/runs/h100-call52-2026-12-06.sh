#!/usr/bin/env bash
# Call 52 (2026-12-06, twelfth session): where place_on_device spends its time on the H100's
# host. The host has no hardware counters for perf (call 51: every event "not supported"), so
# `perf record` samples cpu-clock: the decode replayed 40 times with the cache kept in each
# mode (.dev/wgpool-sym, the commit in .dev/COMMIT), by symbol, and the annotated
# instructions of place_on_device, lock_flushed and reuse_cache::park. Then the decode's A/B of
# call 51 again (.dev/wgpool-bias against .dev/wgpool, runs 2-5 with the cache kept), ROUNDS
# rounds (default 3). Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
. docs/runs/device-env.sh
cat .dev/COMMIT .dev/COMMIT-bias
. docs/runs/prepare-traces.sh
tar xJf .dev/perfpkg.tar.xz -C /tmp
PERF="/tmp/perfpkg/lib/ld-linux-x86-64.so.2 --library-path /tmp/perfpkg/lib /tmp/perfpkg/perf"
for conf in expandable_segments:False expandable_segments:True; do
  tag=${conf#*:}
  timeout 90 $PERF record -q -e cpu-clock -F 20000 -o /tmp/perf-$tag.data .dev/wgpool-sym replay /tmp/traces/kv-decode-cat.csv --gpu --repeat 40 --keep-cache --json --conf $conf > /dev/null 2>&1
  timeout 60 $PERF report -i /tmp/perf-$tag.data --stdio --sort sym 2>/dev/null | grep -v "^#" | grep -v "^$" | head -30 | cut -c1-150 > "$OUT/perf-$tag.txt"
  for sym in 'wgpool::pool::alloc::<impl wgpool::pool::Pool>::place_on_device' 'wgpool::pool::pool_shared::PoolShared::lock_flushed' 'wgpool::pool::reuse_cache::park'; do
    timeout 60 $PERF annotate -i /tmp/perf-$tag.data --stdio -s "$sym" 2>/dev/null | grep -v "^\s*0.00 :" | head -120
  done > "$OUT/annotate-$tag.txt"
done
: > "$OUT/replay.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for conf in expandable_segments:True expandable_segments:False; do
    for build in wgpool-bias wgpool; do
      out=$(timeout 90 .dev/$build replay /tmp/traces/kv-decode-cat.csv --gpu --json --repeat 5 --keep-cache --conf $conf 2>/dev/null)
      python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['round']=$round; r['build']='$build'; print(json.dumps(r))
m=r['rest_median']; print('$round $build $conf pool %.1f engine %.1f ratio %.3f' % (m['pool_ns_per_op'], r['engine_ns_per_op'], r['pool_over_engine']), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl"
    done
  done
done
date -u
