#!/usr/bin/env bash
# Call 68 (2026-12-07, nineteenth session): where the KV-cache decode's driver time goes in
# segments mode, and what the compact policy's releases cost there. Locally (engine replay)
# the default creates 114 segments and releases 61 (4.84 GB created for 3.69 GB reserved at
# peak), `policy:pytorch` 49 and none. Per round (ROUNDS, default 3): PyTorch's first run
# (native), then this build's first run of the decode in segments mode under the default
# and three alternatives, and in pages mode. Carry [".gl", ".dev"] (.dev/wgpool).
set -uo pipefail
ROUNDS=${ROUNDS:-3}
ONLY_TRACES=kv-decode-cat
. docs/runs/table-helper.sh
for round in $(seq 1 "$ROUNDS"); do
  torch kv-decode-cat ""
  for conf in expandable_segments:False expandable_segments:False,compact_reserved_slack:0.06 \
    expandable_segments:False,compact_share_idle:False expandable_segments:False,policy:pytorch \
    expandable_segments:True; do
    wg kv-decode-cat $conf "" wgpool
    tail -1 "$OUT/replay.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); f=r['runs'][0]; print('   loop %.3f; drv %.3f (alloc %.3f); allocations %d, frees %d; device %.3f GB' % (f['replay_time_s'] + f['bind_wait_s'], f['driver_time_s'], r['allocation_time_s'], r['device_allocations'], r['device_frees'], r['device_memory_peak_bytes']/1e9))"
  done
done
date -u
