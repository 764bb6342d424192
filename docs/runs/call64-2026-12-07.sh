#!/usr/bin/env bash
# Call 64 (2026-12-07, seventeenth session): call 63's script again, with .dev/wgpool = 398c8bc
# (the heap read in an untimed run of its own after the timed runs, 99ac9fb, and the engine
# commits 85fec8d..398c8bc) against .dev/wgpool-prev = 5dd1280 (the heap read inside the
# timed first run), with PyTorch 2.11 in the same rounds. What ran:
# `NO_OLD=1 SKIP_ENGINE=1 ROUNDS=3 STOP_AT=150 ONLY_TRACES="kv-decode-cat gpt2-train
# bert-base-varlen resnet50-amp" bash docs/runs/call64-2026-12-07.sh`. Carry [".gl", ".dev"].
exec bash docs/runs/call63-2026-12-07.sh "$@"
