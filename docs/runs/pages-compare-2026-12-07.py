# Pages mode (the default configuration, or CONF) of two wgpool binaries over the 103 traces of
# the sessions' engine rounds (2026-12-07, seventeenth session): prints the traces whose peak
# reserved, maps or bytes mapped differ, and per group the mean ratio, worst ratio and mean churn.
# Traces: /tmp/traces/gpt2-train.csv, /tmp/synth (tools/synth_traces.py), /tmp/ho/rmK/random-mix.csv
# (K = 1..40), /tmp/ho/s101 and /tmp/ho/s202 (workloads), /tmp/oracle (tests/data/oracle, gunzipped).
# Usage: python3 docs/runs/pages-compare-2026-12-07.py BEFORE AFTER [CONF]
import glob, json, statistics, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
before, after = sys.argv[1:3]
conf = sys.argv[3] if len(sys.argv) > 3 else ''
traces = [('tuned', '/tmp/traces/gpt2-train.csv')]
traces += [('tuned', t) for t in sorted(glob.glob('/tmp/synth/*.csv'))]
traces += [('mix', f'/tmp/ho/rm{k}/random-mix.csv') for k in range(1, 41)]
traces += [('held out', t) for s in ('s101', 's202') for t in sorted(glob.glob(f'/tmp/ho/{s}/*.csv')) if 'random-mix' not in t]
traces += [('oracle', t) for t in sorted(glob.glob('/tmp/oracle/*.csv'))]
def run(binary, trace):
    a = [binary, 'replay', trace, '--json', '--device-memory-bytes', '150109880320']
    if conf: a += ['--conf', conf]
    r = subprocess.run(a, capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else None
def cell(gt):
    g, t = gt
    return g, t, run(before, t), run(after, t)
rows = list(ThreadPoolExecutor(2).map(cell, traces))
diff = 0
for g, t, a, b in rows:
    name = '/'.join(t.split('/')[-2:])[:-4]
    if a is None or b is None:
        print(name, 'ERR'); continue
    same = (a['peak_reserved_bytes'], a['segments_created'], a['mapped_bytes_total']) == (b['peak_reserved_bytes'], b['segments_created'], b['mapped_bytes_total'])
    if not same:
        diff += 1
        print(f"{g:8s} {name[:36]:36s} ratio {a['ratio']:.4f} -> {b['ratio']:.4f}  maps {a['segments_created']:5d} -> {b['segments_created']:5d}  churn {a['churn']:.3f} -> {b['churn']:.3f}")
print('differ', diff, 'of', len(rows))
for grp in ('tuned', 'held out', 'oracle', 'mix'):
    sel = [(a, b) for g, t, a, b in rows if g == grp and a and b]
    if not sel: continue
    print(f"{grp:8s} n {len(sel):3d} ratio {statistics.mean(a['ratio'] for a,b in sel):.4f} -> {statistics.mean(b['ratio'] for a,b in sel):.4f}  worst {max(a['ratio'] for a,b in sel):.4f} -> {max(b['ratio'] for a,b in sel):.4f}  churn {statistics.mean(a['churn'] for a,b in sel):.3f} -> {statistics.mean(b['churn'] for a,b in sel):.3f}")
