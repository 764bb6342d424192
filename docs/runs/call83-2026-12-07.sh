#!/usr/bin/env bash
# Call 83 (2026-12-07, twenty-third session). On an H200: issue 21's table first (call 75's
# script, ROUNDS=2), then the rest. On any GPU: what the decode's first run would gain from
# the page reserve (pages mode; call 68 priced segments mode's releases), with PyTorch 2.11's
# first run in each round. ROUNDS (default 4) interleaved rounds, each: PyTorch native; this
# build (.dev/wgpool) `--repeat 3` in segments mode and in pages mode with the defaults, and
# in pages mode with `page_reserve_chunks` 1, 2, 4 and 8. Rounds stop at STOP_AT seconds
# (default 250 after the table). Every file under $OUT (call 75's archive included) is packed
# into $OUT/call83.tgz. Carry [".gl", ".dev"].
set -uo pipefail
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "GPU: $gpu"
case "$gpu" in
  *H200*)
    # Call 75's script: its files packed into $OUT/call75.tgz, which this archive keeps.
    ROUNDS=2 STOP_AT=250 bash docs/runs/call75-2026-12-07.sh
    ;;
esac
start=$SECONDS
ROUNDS=${ROUNDS:-4}
STOP_AT=${STOP_AT:-250}
ONLY_TRACES=kv-decode-cat
{
  . docs/runs/table-helper.sh
  for round in $(seq 1 "$ROUNDS"); do
    [ $((SECONDS - start)) -lt "$STOP_AT" ] || { echo "round $round skipped"; break; }
    torch kv-decode-cat ""
    for conf in expandable_segments:False expandable_segments:True \
      expandable_segments:True,page_reserve_chunks:1 expandable_segments:True,page_reserve_chunks:2 \
      expandable_segments:True,page_reserve_chunks:4 expandable_segments:True,page_reserve_chunks:8; do
      wg kv-decode-cat "$conf" "--repeat 3" wgpool
    done
  done
} > "$OUT/decode-log.txt" 2>&1
tail -40 "$OUT/decode-log.txt"
python3 - "$OUT" <<'PY'
import json, sys, collections
out = sys.argv[1]
torch = {r['round']: r['first_s'] for r in map(json.loads, open(f'{out}/torch.jsonl'))}
rows = collections.defaultdict(list)
for r in map(json.loads, open(f'{out}/replay.jsonl')):
    f = r['runs'][0]
    first = f['replay_time_s'] + f['bind_wait_s']
    rows[r['conf_given']].append((r['round'], first, f['driver_time_s'], f['device_allocations'],
                                  r['device_memory_peak_bytes'] / 1e9,
                                  r.get('background_allocations', 0), r.get('reserve_waits', 0)))
for conf, runs in rows.items():
    print(conf)
    for rnd, first, drv, allocs, dev, background, waits in runs:
        t = torch.get(rnd)
        print('  round %s first %.3f s (driver %.3f, %d allocations, %d in the background, %d waits, %.3f GB) / PyTorch %s = %s'
              % (rnd, first, drv, allocs, background, waits, dev, t, '%.2f' % (first / t) if t else '-'))
PY
(cd "$OUT" && tar czf /tmp/call83.tgz . && find . -mindepth 1 -delete && mv /tmp/call83.tgz .)
