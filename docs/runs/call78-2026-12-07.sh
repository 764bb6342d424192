#!/usr/bin/env bash
# Call 78 (2026-12-07, twenty-second session): on an H200, issue 21's table in ROUNDS
# (default 3) rounds -- b244e2c (.dev/wgpool-old) and this build (.dev/wgpool) in both modes,
# PyTorch 2.11 beside them, then the hot path and the engine alone (call 63's script with
# NO_PREV=1 HOT=1); on any other GPU, call 77's hot path, plain and pinned, instead (calls 74-75 ran
# the table on an H100 at 2734f3f), or nothing with H200_ONLY=1. Every file it writes is packed
# into $OUT/call78.tgz.
# Carry [".gl", ".dev"].
set -uo pipefail
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "GPU: $gpu"
case "$gpu" in
  *H200*)
    NO_PREV=1 HOT=1 ROUNDS=${ROUNDS:-3} STOP_AT=${STOP_AT:-330} bash docs/runs/call63-2026-12-07.sh \
      > "$OUT/table-log.txt" 2>&1
    grep -vE "^   loop" "$OUT/table-log.txt" | tail -40
    (cd "$OUT" && tar czf /tmp/call78.tgz . && find . -mindepth 1 -delete && mv /tmp/call78.tgz .)
    ;;
  *)
    [ -n "${H200_ONLY:-}" ] && { echo "not an H200: nothing run (H200_ONLY)"; exit 0; }
    bash docs/runs/call77-2026-12-07.sh
    ;;
esac
