# The hot path (`replay T --gpu --repeat 9 --keep-cache`: the runs after the first, pool over
# the same process's engine alone) of every H100 call of 2026-12-07 that recorded it, by
# trace and mode (the build `wgpool` of each call, the default configuration of each mode).
# Usage: python3 docs/runs/hot-rounds-2026-12-07.py
import collections
import glob
import json
import re

rows = collections.defaultdict(list)
for path in sorted(glob.glob('docs/runs/h100-call*-2026-12-07*replay.jsonl')):
    call = int(re.search(r'call(\d+)', path).group(1))
    for line in open(path):
        r = json.loads(line)
        if r.get('build') != 'wgpool' or 'keep' not in r.get('args', ''):
            continue
        if r.get('conf_given') not in ('expandable_segments:True', 'expandable_segments:False'):
            continue
        rest = r['rest_median']
        if rest:
            rows[(r['trace'], r['mode'])].append((call, rest['pool_ns_per_op'] / r['engine_ns_per_op']))
for (trace, mode), runs in sorted(rows.items()):
    ratios = ', '.join(f'{x:.2f} (call {c})' for c, x in runs)
    print(f'{trace} {mode}: {sum(x <= 1.5 for _, x in runs)} of {len(runs)} at most 1.5x: {ratios}')
