#!/usr/bin/env bash
# Ran in the twenty-first session (2026-12-07, 12:57 UTC, H100; docs/BENCHMARKS.md, calls 74-75).
# Written when no machine could be started after call 72 (see the
# twentieth session's closing note).
# Call 74 (2026-12-07, twentieth session), on whatever card comes: every GPU test binary at
# the commit in .dev/COMMIT-tests (call 73's script) first, then issue 21's table in one
# round -- b244e2c (the build the issue was filed on) and this session's build in both modes,
# PyTorch 2.11's caching allocator beside them, the hot path (`--repeat 9 --keep-cache`)
# and the engine alone (call 63's script with NO_PREV=1 HOT=1). Carry [".gl", ".dev"]:
# .dev/wgpool, .dev/wgpool-old, .dev/tests.txz.
set -uo pipefail
bash docs/runs/call73-2026-12-07.sh > /dev/null 2>&1
# The table's set-up writes $OUT/log.txt again: keep the tests' log apart.
mv "$OUT/log.txt" "$OUT/tests-log.txt"
grep -E "^== |FAILED|panicked|H100|H200" "$OUT/tests-log.txt" | head -60
NO_DEBS=1 NO_PREV=1 HOT=1 ROUNDS=${ROUNDS:-1} STOP_AT=${STOP_AT:-100} bash docs/runs/call63-2026-12-07.sh \
  > "$OUT/table-log.txt" 2>&1
grep -vE "^   loop" "$OUT/table-log.txt" | tail -40
