#!/usr/bin/env bash
# Call 78 (2026-12-07, twenty-second session): on an H200, issue 21's table in ROUNDS
# (default 3) rounds -- b244e2c (.dev/wgpool-old) and this build (.dev/wgpool) in both modes,
# PyTorch 2.11 beside them, then the hot path and the engine alone (call 63's script with
# NO_PREV=1 HOT=1); on any other GPU, call 77's hot path, plain and pinned, instead (calls 74-75 ran
# the table on an H100 at 2734f3f), or nothing with H200_ONLY=1. Every file it writes is packed
# into one archive under $OUT (call75.tgz or call77.tgz, after the script it runs).
# Carry [".gl", ".dev"].
set -uo pipefail
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "GPU: $gpu"
case "$gpu" in
  *H200*)
    # Call 75's script: call 63's with NO_PREV=1 HOT=1, its files packed into call75.tgz.
    ROUNDS=${ROUNDS:-3} STOP_AT=${STOP_AT:-330} bash docs/runs/call75-2026-12-07.sh
    ;;
  *)
    [ -n "${H200_ONLY:-}" ] && { echo "not an H200: nothing run (H200_ONLY)"; exit 0; }
    bash docs/runs/call77-2026-12-07.sh
    ;;
esac
