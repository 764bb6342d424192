#!/usr/bin/env bash
# Call 88 (2026-12-07, twenty-fifth session): call 87 with `compact_recycle_rate:0`, in
# segments mode and in pages mode. Carry [".gl", ".dev"]. Files in $OUT/call88.tgz. (Run on
# the machine call 87 had warmed, as call 87's script rewritten by sed to these
# configurations and that name, with NO_DEBS=1: the same commands as this.)
CONFS="expandable_segments:False,compact_recycle_rate:0 compact_recycle_rate:0" NAME=call88 \
  bash docs/runs/call87-2026-12-07.sh
