#!/usr/bin/env bash
# Call 85 (2026-12-07, twenty-fourth session). Carry [".gl", ".dev"] (.dev as call 84 says).
# The table first where it can run: on an H200, call 83's script with ROUNDS=2 STOP_AT=100
# (issue 21's table, two rounds, then the decode's page-reserve trial in two rounds), no perf
# profile, so that the table fits the call's 600 s; on any other GPU, call 84's script (the
# perf profile of the decode's first run, then the page-reserve trial in three rounds).
# Every file ends in $OUT/call83.tgz.
set -uo pipefail
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu" in
  *H200*) ROUNDS=2 STOP_AT=100 bash docs/runs/call83-2026-12-07.sh ;;
  *) bash docs/runs/call84-2026-12-07.sh ;;
esac
