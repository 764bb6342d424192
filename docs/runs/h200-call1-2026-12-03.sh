#!/bin/bash
# H200 call 1 (2026-12-03): replay --gpu both modes, page costs, bench, snapshot viz, oracle re-recording.
exec > >(tee $OUT/log.txt) 2>&1
export WGPU_BACKEND=vulkan PYTHONUNBUFFERED=1
T=tests/data/gpt2-train.csv
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
git log --oneline -1 2>/dev/null || true
.dev/wgpool info 2>&1 | head -40
echo "== replay --gpu pages (default)"; time .dev/wgpool replay $T --gpu --json > $OUT/gpu_pages.json; cat $OUT/gpu_pages.json
echo "== replay --gpu segments"; time .dev/wgpool replay $T --gpu --json --conf expandable_segments:False > $OUT/gpu_segments.json; cat $OUT/gpu_segments.json
echo "== replay --gpu pytorch expandable"; time .dev/wgpool replay $T --gpu --json --conf policy:pytorch,expandable_segments:True
echo "== replay --gpu pytorch native"; time .dev/wgpool replay $T --gpu --json --conf policy:pytorch
echo "== page_costs"; time .dev/page_costs --grow-mib 1024 --dispatches 1000 > $OUT/page_costs.json; cat $OUT/page_costs.json
echo "== bench"; time .dev/wgpool bench --json > $OUT/bench.json; tail -c 3000 $OUT/bench.json
echo "== snapshots"
.dev/wgpool replay $T --conf policy:pytorch --snapshot /tmp/native.pickle --json | head -c 300; echo
python3 tools/check_snapshot.py /tmp/native.pickle --require-torch
.dev/wgpool replay $T --snapshot /tmp/pages.pickle --json | head -c 300; echo
python3 tools/check_snapshot.py /tmp/pages.pickle --require-torch
for k in trace_plot segment_plot; do python3 -m torch.cuda._memory_viz $k /tmp/native.pickle -o /tmp/$k.html && ls -la /tmp/$k.html; done
python3 -m torch.cuda._memory_viz stats /tmp/native.pickle | head -20
python3 -m torch.cuda._memory_viz trace_plot /tmp/pages.pickle -o /tmp/pages_trace.html && ls -la /tmp/pages_trace.html
python3 -c "import torch; print(torch.__version__)"
echo "== oracle"; time timeout 280 python3 tools/oracle/run_h200.py /tmp/orc tests/data/gpt2-train.csv > /tmp/oracle.log 2>&1; echo rc=$?
tail -120 /tmp/oracle.log; cp /tmp/oracle.log /tmp/orc/
tar czf $OUT/oracle.tgz -C /tmp orc; ls -la $OUT
