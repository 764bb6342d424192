#!/usr/bin/env bash
# Call 75 (2026-12-07, twenty-first session), on the machine call 74 left warm: issue 21's
# table in ROUNDS (default 2) more rounds -- b244e2c and this build (.dev/COMMIT) in both
# modes, PyTorch 2.11 beside them, the hot path and the engine alone (call 63's script with
# NO_PREV=1 HOT=1) -- with every file it writes packed into $OUT/call75.tgz (call 74's
# replay.jsonl and logs did not come back: too many files under $OUT). Carry [".gl", ".dev"].
set -uo pipefail
NO_PREV=1 HOT=1 ROUNDS=${ROUNDS:-2} STOP_AT=${STOP_AT:-200} bash docs/runs/call63-2026-12-07.sh \
  > "$OUT/table-log.txt" 2>&1
grep -vE "^   loop" "$OUT/table-log.txt" | tail -30
(cd "$OUT" && tar czf /tmp/call75.tgz . && find . -mindepth 1 -delete && mv /tmp/call75.tgz .)
