#!/usr/bin/env bash
# Call 65 (2026-12-07, eighteenth session): issue 21's table before and after in one call,
# with PyTorch 2.11 in the same rounds: b244e2c (.dev/wgpool-old, the build the issue was
# filed on, one run) against this session's build (.dev/wgpool, .dev/COMMIT, `--repeat 5`),
# both modes; then the hot path (`--repeat 9 --keep-cache`) and one `--heap-watch` replay
# of each trace and mode by this build, then the engine alone against b244e2c. Call 63's
# script with NO_PREV=1 HOT=1 HEAP=1; ROUNDS and STOP_AT as there. Carry [".gl", ".dev"].
NO_PREV=1 HOT=1 HEAP=1 exec bash docs/runs/call63-2026-12-07.sh "$@"
