#!/usr/bin/env bash
# Prints the ratio-against-churn table of docs/POLICY.md: every policy and knob setting
# replayed over one trace. Usage: tools/policy_curve.sh TRACE [WGPOOL_BINARY]
set -euo pipefail
trace=${1:?usage: tools/policy_curve.sh TRACE [WGPOOL_BINARY]}
bin=${2:-target/release/wgpool}
row() {
  "$bin" replay "$trace" --json --conf "$1" |
    awk -v conf="$1" -F': ' '
      /"ratio"/ {gsub(",","",$2); ratio=$2}
      /"churn"/ {gsub(",","",$2); churn=$2}
      /"segments_created"/ {gsub(",","",$2); segs=$2}
      END {printf "| `%s` | %.4f | %.3f | %s |\n", conf, ratio, churn, segs}'
}
echo "| --conf | peak reserved / peak live | segment bytes created / peak live | segments created |"
echo "| --- | --- | --- | --- |"
for conf in policy:pytorch policy:pytorch,max_split_size_mb:128 policy:pytorch,max_split_size_mb:512 \
            policy:pytorch,roundup_power2_divisions:4 policy:pytorch,garbage_collection_threshold:0.9,memory_limit_mb:20000; do
  row "$conf"
done
for share in 0 0.0625 0.125 0.25 0.5; do
  for slack in 0.01 0.03 0.06 0.1; do
    for budget in 0 0.25 1 1000; do
      row "policy:compact,compact_min_share:$share,compact_reserved_slack:$slack,compact_release_budget:$budget"
    done
  done
done
