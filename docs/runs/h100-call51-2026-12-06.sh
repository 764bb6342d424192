#!/usr/bin/env bash
# Call 51 (2026-12-06, twelfth session): (1) the cheaper miss path (47eaccd; .dev/wgpool is built from the commit in .dev/COMMIT, which adds the always-checked second entry)
# against the owner bias alone (9d6280c, .dev/wgpool-bias), runs 2-5 with the cache kept, all
# four traces in both modes, ROUNDS interleaved rounds (default 3); (2) where the pool's time
# goes on this host's CPU: `perf stat` (Debian 12's perf 6.1 with its libraries, carried in
# .dev/perfpkg.tar.xz and run through its own loader) of the decode replayed 40 times with
# the cache kept, against the engine alone (`replay` without --gpu), and `perf record` of
# the same with cycles and with instructions, by symbol (.dev/wgpool-sym: with its
# symbol table, same commit). Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
grep -m1 "model name" /proc/cpuinfo; nproc; uname -r
cat .dev/COMMIT .dev/COMMIT-bias
. docs/runs/prepare-traces.sh
: > "$OUT/replay.jsonl"
wg() {
  out=$(timeout 90 .dev/$4 replay /tmp/traces/$1.csv --gpu --json $3 --conf "$2" 2>/dev/null)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']=$round; r['conf_given']='$2'; r['args']='$3'; r['build']='$4'
print(json.dumps(r))
m=r['rest_median']
print('$round $4 $1 $2 bias %s rest pool %.1f engine %.1f ratio %.3f' % (r.get('owner_bias'), m['pool_ns_per_op'], r['engine_ns_per_op'], m['pool_ns_per_op']/r['engine_ns_per_op']), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2 $4: no report"
}
for round in $(seq 1 "$ROUNDS"); do
  for t in $TRACES; do
    for conf in expandable_segments:True expandable_segments:False; do
      wg $t $conf "--repeat 5 --keep-cache" wgpool-bias
      wg $t $conf "--repeat 5 --keep-cache" wgpool
    done
  done
done
tar xJf .dev/perfpkg.tar.xz -C /tmp
PERF="/tmp/perfpkg/lib/ld-linux-x86-64.so.2 --library-path /tmp/perfpkg/lib /tmp/perfpkg/perf"
cat /proc/sys/kernel/perf_event_paranoid
echo 0 > /proc/sys/kernel/perf_event_paranoid 2>/dev/null
echo 0 > /proc/sys/kernel/kptr_restrict 2>/dev/null
BASIC=cycles,instructions,branch-misses,L1-icache-load-misses,L1-dcache-load-misses
EXTRA=idq.dsb_uops,idq.mite_uops,frontend_retired.dsb_miss,icache_64b.iftag_stall,frontend_retired.l1i_miss
for conf in expandable_segments:True expandable_segments:False; do
  echo "== perf stat pool $conf"
  timeout 60 $PERF stat -e $BASIC .dev/wgpool-sym replay /tmp/traces/kv-decode-cat.csv --gpu --repeat 40 --keep-cache --json --conf $conf 2>&1 >/dev/null | grep -v "^$" | tail -12
  timeout 60 $PERF stat -e $EXTRA .dev/wgpool-sym replay /tmp/traces/kv-decode-cat.csv --gpu --repeat 40 --keep-cache --json --conf $conf 2>&1 >/dev/null | grep -v "^$" | tail -10
  echo "== perf stat engine alone $conf"
  timeout 60 $PERF stat -e $BASIC .dev/wgpool-sym replay /tmp/traces/kv-decode-cat.csv --json --conf $conf 2>&1 >/dev/null | grep -v "^$" | tail -12
  timeout 60 $PERF stat -e $EXTRA .dev/wgpool-sym replay /tmp/traces/kv-decode-cat.csv --json --conf $conf 2>&1 >/dev/null | grep -v "^$" | tail -10
done
for ev in cycles instructions; do
  echo "== perf record $ev, segments"
  timeout 90 $PERF record -q -e $ev -o /tmp/perf-$ev.data .dev/wgpool-sym replay /tmp/traces/kv-decode-cat.csv --gpu --repeat 40 --keep-cache --json --conf expandable_segments:False > /dev/null 2>&1
  timeout 60 $PERF report -i /tmp/perf-$ev.data --stdio --sort sym 2>/dev/null | grep -v "^#" | grep -v "^$" | head -45 | cut -c1-150 | tee "$OUT/perf-$ev-segments.txt"
done
timeout 60 $PERF annotate -i /tmp/perf-cycles.data --stdio -s 'wgpool::pool::alloc::<impl wgpool::pool::Pool>::alloc' 2>/dev/null | head -400 > "$OUT/annotate-alloc.txt"
date -u
