# The KV-cache decode's first run against PyTorch's native first run in the same round, over
# every H100 call from 62 on that replayed both (docs/runs/h100-callN-2026-12-07-{replay,
# torch}.jsonl; the build `wgpool` of each call, the default configuration of each mode).
# A round is counted as quiet when the same process's engine-alone replay ran at its usual
# speed (at most 50 ns an operation in pages mode, 65 in segments mode) and the pool within
# 1.7x of it: the host's state, read from inside the process that was timed.
# For each mode: the rounds, those at most 0.5x PyTorch, and for the quiet ones the first
# runs, PyTorch's, and what the first run would be with no pool overhead at all (the driver's
# time plus the engine alone's time for the trace's operations).
# Usage: python3 docs/runs/decode-rounds-2026-12-07.py
import glob
import json
import re

rows = []
for path in sorted(glob.glob('docs/runs/h100-call*-2026-12-07-replay.jsonl')):
    call = int(re.search(r'call(\d+)', path).group(1))
    if call < 62:
        continue
    try:
        lines = open(path.replace('replay.jsonl', 'torch.jsonl')).read().splitlines()
    except FileNotFoundError:
        continue
    torch = {}
    for line in lines:
        r = json.loads(line)
        if r['trace'].startswith('kv-decode-cat') and r['conf'] == '':
            torch[str(r.get('round', '1'))] = r['first_s']
    for line in open(path):
        r = json.loads(line)
        if r.get('trace') != 'kv-decode-cat' or r.get('build') != 'wgpool':
            continue
        if r.get('conf_given') not in ('expandable_segments:True', 'expandable_segments:False'):
            continue
        if 'keep' in r.get('args', '') or r.get('round') in ('hot', 'heap'):
            continue
        t = torch.get(str(r['round']))
        if not t:
            continue
        x = r['runs'][0]
        first = x['replay_time_s'] + x.get('bind_wait_s', 0)
        floor = x['driver_time_s'] + r['engine_ns_per_op'] * r['ops'] * 1e-9
        quiet = (r['engine_ns_per_op'] <= (50 if r['mode'] == 'pages' else 65)
                 and x['pool_ns_per_op'] <= 1.7 * r['engine_ns_per_op'])
        rows.append((call, r['round'], r['mode'], first, t, floor, x['driver_time_s'], quiet))
for mode in ('pages', 'segments'):
    sel = [r for r in rows if r[2] == mode]
    quiet = [r for r in sel if r[7]]
    ratios = sorted(round(r[3] / r[4], 2) for r in quiet)
    print(f'{mode}: {len(sel)} rounds, {sum(r[3] / r[4] <= 0.5 for r in sel)} at most 0.5x PyTorch; '
          f'{len(quiet)} quiet, {sum(x <= 0.5 for x in ratios)} of them at most 0.5x: {ratios}')
    print(f'  quiet rounds: first run {min(r[3] for r in quiet):.3f}-{max(r[3] for r in quiet):.3f} s, '
          f'driver {min(r[6] for r in quiet):.3f}-{max(r[6] for r in quiet):.3f} s, '
          f'PyTorch {min(r[4] for r in quiet):.3f}-{max(r[4] for r in quiet):.3f} s; with no pool overhead '
          f'{min(r[5] for r in quiet):.3f}-{max(r[5] for r in quiet):.3f} s, '
          f'{min(r[5] / r[4] for r in quiet):.2f}-{max(r[5] / r[4] for r in quiet):.2f}x PyTorch')
