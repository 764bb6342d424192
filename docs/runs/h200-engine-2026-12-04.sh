#!/usr/bin/env bash
# Issue 21, engine part (branch issue-21-engine): the engine's cost per operation, default
# against policy:pytorch, on the H200 machine's host CPU, before (main) and after (this
# branch), and the churn of the default on the held-out KV-cache decode under several
# `compact_page_slack` values. No GPU is used. About 10 minutes.
#
# Builds: `cargo build --release --bin wgpool` of main, binary at .dev/wgpool-main, and of
# this branch, binary at .dev/wgpool. Arguments: the four traces of the issue's table, the
# decode last, e.g.
#   docs/runs/h200-engine-2026-12-04.sh gpt2-train.csv resnet.csv bert.csv decode.csv
set -uo pipefail
exec > >(tee "$OUT/log.txt") 2>&1
date -u
lscpu | grep -E "Model name|^CPU\(s\)" || true
git log --oneline -1 2>/dev/null || true
[ "$#" -ge 1 ] || { echo "usage: $0 TRACE... (the decode trace last)"; exit 2; }

echo "== engine ns/op, default and policy:pytorch, main (base) and this branch (head)"
# Each row: the median over 5 rounds of each run's ns_per_op_median, the two configurations
# and the two builds interleaved in every round; ratio = default / policy:pytorch.
python3 tools/engine_cost.py --base .dev/wgpool-main --rounds 5 .dev/wgpool "$@" \
    | tee "$OUT/engine-cost.md"

decode="${!#}"
echo "== the decode trace: memory and churn by compact_page_slack (this branch)"
for conf in "" compact_page_slack:0 compact_page_slack:0.02 compact_page_slack:0.03 \
    compact_page_slack:0.05 policy:pytorch,expandable_segments:True; do
  .dev/wgpool replay "$decode" --json ${conf:+--conf "$conf"} > "$OUT/decode-${conf:-default}.json"
  python3 - "$OUT/decode-${conf:-default}.json" "${conf:-default}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
live = r["peak_live_bytes"]
print("%-42s ratio %.4f mapped %.3fx binds %d ns/op %.1f" % (
    sys.argv[2], r["ratio"], r["mapped_bytes_total"] / live, r["bind_calls"], r["ns_per_op_median"]))
PY
done
echo "== the same with main's default (before)"
.dev/wgpool-main replay "$decode" --json > "$OUT/decode-main.json"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); l=r['peak_live_bytes']; print('main default: ratio %.4f mapped %.3fx binds %d' % (r['ratio'], r['mapped_bytes_total']/l, r['bind_calls']))" "$OUT/decode-main.json"
