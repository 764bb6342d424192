# Every H100 round of 2026-12-07 (calls 62-82, docs/runs/h100-callN-2026-12-07-replay.jsonl)
# read again: the build `wgpool` of each call, the default configuration of each mode.
# Usage: python3 docs/runs/rounds-2026-12-07.py decode|modes|hot
#   decode  the KV-cache decode's first run (until every bind is applied) against PyTorch
#           2.11's native first run of the same round (h100-callN-2026-12-07-torch.jsonl).
#           A round is quiet when the same process's engine-alone replay ran at its usual
#           speed (at most 50 ns an operation in pages mode, 65 in segments mode) and the
#           pool within 1.7x of it: the host's state, read from inside the timed process.
#           For the quiet rounds also the run with no pool overhead at all (the driver's
#           time plus the engine alone's time for the trace's operations).
#   modes   pages mode over fixed segments, first runs, each round that ran both modes.
#   hot     the hot path (`--repeat 9 --keep-cache`): the runs after the first, pool over the
#           same process's engine alone.
import collections
import glob
import json
import re
import sys


def reports():
    """(call, report) for every default-configuration replay by the build `wgpool`."""
    for path in sorted(glob.glob('docs/runs/h100-call*-2026-12-07-replay.jsonl')):
        call = int(re.search(r'call(\d+)', path).group(1))
        for line in open(path):
            r = json.loads(line)
            if r.get('build') != 'wgpool':
                continue
            if r.get('conf_given') not in ('expandable_segments:True', 'expandable_segments:False'):
                continue
            yield call, r


def first_runs():
    """(call, report, first run until every bind is applied) of the runs from a cold start."""
    for call, r in reports():
        if 'keep' in r.get('args', '') or r.get('round') in ('hot', 'heap'):
            continue
        x = r['runs'][0]
        yield call, r, x['replay_time_s'] + x.get('bind_wait_s', 0)


def torch_firsts(call):
    """PyTorch's native first run of the decode in each round of `call`."""
    try:
        lines = open(f'docs/runs/h100-call{call}-2026-12-07-torch.jsonl').read().splitlines()
    except FileNotFoundError:
        return {}
    rounds = {}
    for line in lines:
        r = json.loads(line)
        if r['trace'].startswith('kv-decode-cat') and r['conf'] == '':
            rounds[str(r.get('round', '1'))] = r['first_s']
    return rounds


def decode():
    rows = []
    torch = {}
    for call, r, first in first_runs():
        if r['trace'] != 'kv-decode-cat':
            continue
        torch.setdefault(call, torch_firsts(call))
        t = torch[call].get(str(r['round']))
        if not t:
            continue
        x = r['runs'][0]
        floor = x['driver_time_s'] + r['engine_ns_per_op'] * r['ops'] * 1e-9
        quiet = (r['engine_ns_per_op'] <= (50 if r['mode'] == 'pages' else 65)
                 and x['pool_ns_per_op'] <= 1.7 * r['engine_ns_per_op'])
        rows.append((r['mode'], first, t, floor, x['driver_time_s'], quiet))
    for mode in ('pages', 'segments'):
        sel = [r for r in rows if r[0] == mode]
        quiet = [r for r in sel if r[5]]
        ratios = sorted(round(r[1] / r[2], 2) for r in quiet)
        print(f'{mode}: {len(sel)} rounds, {sum(r[1] / r[2] <= 0.5 for r in sel)} at most 0.5x PyTorch; '
              f'{len(quiet)} quiet, {sum(x <= 0.5 for x in ratios)} of them at most 0.5x: {ratios}')
        span = lambda i: f'{min(r[i] for r in quiet):.3f}-{max(r[i] for r in quiet):.3f} s'
        print(f'  quiet rounds: first run {span(1)}, driver {span(4)}, PyTorch {span(2)}; '
              f'with no pool overhead {span(3)}, '
              f'{min(r[3] / r[2] for r in quiet):.2f}-{max(r[3] / r[2] for r in quiet):.2f}x PyTorch')


def modes():
    firsts = collections.defaultdict(dict)
    for call, r, first in first_runs():
        firsts[(call, str(r['round']), r['trace'])][r['mode']] = first
    ratios = collections.defaultdict(list)
    for (_, _, trace), pair in firsts.items():
        if 'pages' in pair and 'segments' in pair:
            ratios[trace].append(pair['pages'] / pair['segments'])
    for trace, xs in sorted(ratios.items()):
        xs.sort()
        print(f'{trace}: {len(xs)} rounds, pages at most segments in {sum(x <= 1 for x in xs)}, '
              f'median {xs[len(xs) // 2]:.2f}, range {xs[0]:.2f}-{xs[-1]:.2f}')


def hot():
    rows = collections.defaultdict(list)
    for call, r in reports():
        rest = r['rest_median']
        if 'keep' in r.get('args', '') and rest:
            rows[(r['trace'], r['mode'])].append((call, rest['pool_ns_per_op'] / r['engine_ns_per_op']))
    for (trace, mode), runs in sorted(rows.items()):
        ratios = ', '.join(f'{x:.2f} (call {c})' for c, x in runs)
        print(f'{trace} {mode}: {sum(x <= 1.5 for _, x in runs)} of {len(runs)} at most 1.5x: {ratios}')


{'decode': decode, 'modes': modes, 'hot': hot}[sys.argv[1]]()
