#!/usr/bin/env bash
# Call 89 (2026-12-07, twenty-fifth session). Carry [".gl", ".dev"] (.dev/wgpool: the build
# whose runs report their device memory and reserved peaks so far). Calls 87 and 88 again,
# the four configurations in one call, now that each run says what memory the loop reached:
# call 87 read the first run's device memory only.
CONFS="default compact_recycle_rate:0 expandable_segments:False expandable_segments:False,compact_recycle_rate:0" \
  NAME=call89 bash docs/runs/call87-2026-12-07.sh
