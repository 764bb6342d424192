#!/usr/bin/env bash
# Call 76 (2026-12-07, twenty-first session): the README's main job on NVIDIA at this build
# (call 69's script: `bench --quick --json` three times, then `bench` in full), then two more
# rounds of issue 21's table (call 75's script, which packs every file under $OUT into
# $OUT/call75.tgz).
# Carry [".gl", ".dev"] (.dev/wgpool at .dev/COMMIT).
set -uo pipefail
bash docs/runs/call69-2026-12-07.sh 2>&1 | tail -60
mv "$OUT/log.txt" "$OUT/bench-log.txt"
NO_DEBS=1 bash docs/runs/call75-2026-12-07.sh
