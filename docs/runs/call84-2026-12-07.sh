#!/usr/bin/env bash
# Call 84 (2026-12-07, twenty-third session). Carry [".gl", ".dev"]: .dev/wgpool (fd59206,
# release, debug info stripped, symbol table kept), .dev/wgpool-old (b244e2c),
# .dev/perfpkg.tar.xz (Debian 12's perf 6.1 with its libraries, run through its own loader).
# 1. Where the decode's first run spends its time outside the driver calls the pool times:
#    `perf record -e cpu-clock -F 20000` over ten processes of `replay --gpu --repeat 1` in
#    each mode (every thread, by command, library and symbol), and `perf stat` of one.
# 2. Call 83's script: on an H200 only, issue 21's table; then the decode's first run with the
#    page reserve (pages mode) of 1 to 8 chunks, PyTorch's first run beside it (ROUNDS,
#    default 3).
# Part 1's files are packed into perf.tgz, and every file into $OUT/call83.tgz by part 2.
set -uo pipefail
. docs/runs/device-env.sh
. docs/runs/prepare-traces.sh
tar xJf .dev/perfpkg.tar.xz -C /tmp
PERF="/tmp/perfpkg/lib/ld-linux-x86-64.so.2 --library-path /tmp/perfpkg/lib /tmp/perfpkg/perf"
echo 0 > /proc/sys/kernel/perf_event_paranoid 2>/dev/null
echo 0 > /proc/sys/kernel/kptr_restrict 2>/dev/null
grep -m1 "model name" /proc/cpuinfo; nproc
for conf in expandable_segments:True expandable_segments:False; do
  m=${conf#*:}
  echo "== perf stat, one first run, $conf"
  timeout 60 $PERF stat -e task-clock,page-faults,context-switches,cpu-migrations \
    .dev/wgpool replay /tmp/traces/kv-decode-cat.csv --gpu --repeat 1 --json --conf $conf \
    2> "$OUT/stat-$m.txt" > "$OUT/stat-$m.json"
  tail -12 "$OUT/stat-$m.txt"
  echo "== perf record, ten first runs, $conf"
  timeout 120 $PERF record -q -e cpu-clock -F 20000 -o /tmp/perf-$m.data -- bash -c \
    "for i in 1 2 3 4 5 6 7 8 9 10; do .dev/wgpool replay /tmp/traces/kv-decode-cat.csv --gpu --repeat 1 --json --conf $conf; done" \
    > "$OUT/record-$m.jsonl" 2>/dev/null
  timeout 60 $PERF report -i /tmp/perf-$m.data --stdio --sort comm,dso,sym 2>/dev/null \
    | grep -v "^#" | grep -v "^$" | head -80 | cut -c1-170 > "$OUT/perf-$m.txt"
  timeout 60 $PERF report -i /tmp/perf-$m.data --stdio --sort comm,dso 2>/dev/null \
    | grep -v "^#" | grep -v "^$" | head -30 | cut -c1-170 > "$OUT/perf-dso-$m.txt"
  head -25 "$OUT/perf-dso-$m.txt"
  head -40 "$OUT/perf-$m.txt"
  python3 -c "
import json
# The reports are pretty-printed, one after another: read them one object at a time.
text, at, decoder = open('$OUT/record-$m.jsonl').read(), 0, json.JSONDecoder()
while at < len(text.rstrip()):
    r, at = decoder.raw_decode(text, at)
    while at < len(text) and text[at].isspace():
        at += 1
    print('first run %.3f s, driver %.3f, pool %.1f ns/op, engine %.1f' % (r['wall_time_s'], r['driver_time_s'], r['pool_ns_per_op'], r['engine_ns_per_op']))
"
done
(cd "$OUT" && mkdir -p /tmp/pk && mv ./* /tmp/pk/ 2>/dev/null; tar czf /tmp/perfpart.tgz -C /tmp/pk . ; rm -rf /tmp/pk; mv /tmp/perfpart.tgz "$OUT/perf.tgz")
ROUNDS=${ROUNDS:-3} STOP_AT=${STOP_AT:-200} bash docs/runs/call83-2026-12-07.sh 2>&1 | tail -45
