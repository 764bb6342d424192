#!/usr/bin/env bash
# Call 77 (2026-12-07, twenty-second session): the pool's hot path (`replay --gpu --repeat 9
# --keep-cache`) on issue 21's four traces in both modes, ROUNDS (default 3) rounds, by the
# build in .dev/wgpool (.dev/COMMIT), each replay also with the process on CPUs 4-7 only
# (.dev/wgpool-pinned, a `taskset` wrapper the script writes; call 77 carried the same one:
# does pinning steady the ratio?), then `bench`'s alloc rows by it. (Written first to compare
# an engine baseline interleaved with the pool's runs against 2734f3f's; that change was
# reverted before any call ran, see docs/BENCHMARKS.md.) Every file it writes is packed
# into $OUT/call77.tgz. Carry [".gl", ".dev"].
set -uo pipefail
ROUNDS=${ROUNDS:-3}
printf '#!/bin/sh\nexec taskset -c 4-7 "$(dirname "$0")/wgpool" "$@"\n' > .dev/wgpool-pinned
chmod +x .dev/wgpool-pinned
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
nproc; lscpu | grep -E "Model name" || true
cat .dev/COMMIT
. docs/runs/prepare-traces.sh
. docs/runs/replay-helper.sh
for round in $(seq 1 "$ROUNDS"); do
  for t in $TRACES; do
    for conf in expandable_segments:True expandable_segments:False; do
      for build in wgpool wgpool-pinned; do
        wg "$t" "$conf" "--repeat 9 --keep-cache" "$build"
      done
    done
  done
done
echo "== pool_over_engine per round"
python3 - "$OUT/replay.jsonl" <<'EOF' | tee "$OUT/hot-summary.txt"
import json, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs = [x['pool_ns_per_op'] for x in r['runs'][1:]]
    rows[(r['trace'], r['mode'], r['build'])].append(
        f"{r['pool_over_engine']:.2f} (pool {min(runs):.0f}-{max(runs):.0f}, engine {r['engine_ns_per_op']:.0f} ns)")
for (trace, mode, build), values in sorted(rows.items()):
    print(f"{trace:18s} {mode:9s} {build:12s} " + "  ".join(values))
EOF
echo "== bench (this build): alloc rows"
timeout 240 .dev/wgpool bench --json > "$OUT/bench.json" 2> "$OUT/bench-stderr.txt"
echo "bench rc $?"
python3 - "$OUT/bench.json" <<'EOF'
import json, sys
for row in json.load(open(sys.argv[1]))['alloc']['rows']:
    print(row['mode'], 'cached %.0f ns' % row['cached_ns'],
          'pool/engine %.2f (%.1f / %.1f ns)' % (row['pool_over_engine'], row['pool_ns_per_op'], row['engine_ns_per_op']),
          'hot %.2f (%.1f / %.1f ns)' % (row['hot_pool_over_engine'], row['hot_pool_ns_per_op'], row['hot_engine_ns_per_op']))
EOF
date -u
(cd "$OUT" && tar czf /tmp/call77.tgz . && find . -mindepth 1 -delete && mv /tmp/call77.tgz .)
