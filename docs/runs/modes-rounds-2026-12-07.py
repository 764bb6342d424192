# Pages mode over fixed segments, first run until every bind is applied, in every round of
# the H100 calls from 62 on that ran both modes of a trace (docs/runs/h100-callN-2026-12-07-
# replay.jsonl; the build `wgpool` of each call, the default configuration of each mode).
# Usage: python3 docs/runs/modes-rounds-2026-12-07.py
import collections
import glob
import json
import re

firsts = collections.defaultdict(dict)
for path in sorted(glob.glob('docs/runs/h100-call*-2026-12-07-replay.jsonl')):
    call = int(re.search(r'call(\d+)', path).group(1))
    if call < 62:
        continue
    for line in open(path):
        r = json.loads(line)
        if r.get('build') != 'wgpool':
            continue
        if r.get('conf_given') not in ('expandable_segments:True', 'expandable_segments:False'):
            continue
        if 'keep' in r.get('args', '') or r.get('round') in ('hot', 'heap'):
            continue
        x = r['runs'][0]
        firsts[(call, str(r['round']), r['trace'])][r['mode']] = x['replay_time_s'] + x.get('bind_wait_s', 0)
ratios = collections.defaultdict(list)
for (call, _, trace), modes in firsts.items():
    if 'pages' in modes and 'segments' in modes:
        ratios[trace].append(modes['pages'] / modes['segments'])
for trace, xs in sorted(ratios.items()):
    xs.sort()
    print(f'{trace}: {len(xs)} rounds, pages at most segments in {sum(x <= 1 for x in xs)}, '
          f'median {xs[len(xs) // 2]:.2f}, range {xs[0]:.2f}-{xs[-1]:.2f}')
