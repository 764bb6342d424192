# Segments mode's shared idle segment (2026-12-07, sixteenth session), over the 105 traces of
# docs/POLICY.md's segments-mode rounds: `python3 docs/runs/segments-share-2026-12-07.py BEFORE AFTER OUT.jsonl`.
# Traces: gpt2-train, /tmp/synth (tools/synth_traces.py), /tmp/ho/rmK (`--seed-offset K
# random-mix`, K = 1..40), /tmp/ho/s101 and /tmp/ho/s202 (`--seed-offset 101` / `202`, all 17
# workloads) and /tmp/oracle (tests/data/oracle, gunzipped). Each cell: `BINARY replay T --json
# --device-memory-bytes 150109880320 --conf expandable_segments:False` (policy:pytorch with
# AFTER). Prints one line per trace and a summary; writes every report's scalars to OUT.jsonl.
import glob, json, statistics, subprocess, sys

before, after, out_path = sys.argv[1:4]
traces = [('tuned', '/tmp/traces/gpt2-train.csv')]
traces += [('tuned', t) for t in sorted(glob.glob('/tmp/synth/*.csv'))]
traces += [('tuned' if k <= 12 else 'held out', f'/tmp/ho/rm{k}/random-mix.csv') for k in range(1, 41)]
traces += [('held out', t) for s in ('s101', 's202') for t in sorted(glob.glob(f'/tmp/ho/{s}/*.csv'))]
traces += [('oracle', t) for t in sorted(glob.glob('/tmp/oracle/*.csv'))]
base = 'expandable_segments:False'
out = open(out_path, 'w')


def run(binary, trace, conf):
    r = subprocess.run([binary, 'replay', trace, '--json', '--device-memory-bytes', '150109880320',
                        '--conf', conf], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else None


rows = []
for group, t in traces:
    name = '/'.join(t.split('/')[-2:])[:-4]
    cells = {'before': run(before, t, base), 'after': run(after, t, base),
             'pytorch': run(after, t, base + ',policy:pytorch')}
    if None in cells.values():
        print(name, 'ERR', flush=True)
        continue
    for label, d in cells.items():
        d = {k: v for k, v in d.items() if not isinstance(v, (dict, list))}
        d.update(trace=name, group=group, label=label)
        out.write(json.dumps(d) + '\n')
    a, b, p = cells['before'], cells['after'], cells['pytorch']
    rows.append((group, name, a, b, p))
    mark = ('' if b['peak_reserved_bytes'] <= a['peak_reserved_bytes'] else ' more')
    mark += ('' if b['peak_reserved_bytes'] < p['peak_reserved_bytes'] else ' LOSES-OR-TIES')
    print(f"{group:8s} {name[:34]:34s} before {a['ratio']:.4f}/{a['churn']:.2f} s{a['segments_created']:4d}"
          f" | after {b['ratio']:.4f}/{b['churn']:.2f} s{b['segments_created']:4d}"
          f" | pytorch {p['ratio']:.4f}{mark}", flush=True)
for group in ('tuned', 'held out', 'oracle', 'all'):
    sel = [r for r in rows if group in ('all', r[0])]
    for label, i in (('before', 2), ('after', 3)):
        loses = sum(r[i]['peak_reserved_bytes'] >= r[4]['peak_reserved_bytes'] for r in sel)
        rel = statistics.mean(r[i]['peak_reserved_bytes'] / r[4]['peak_reserved_bytes'] for r in sel)
        churn = statistics.mean(r[i]['churn'] for r in sel)
        print(f"{group:8s} {label:6s} traces {len(sel):3d} loses-or-ties {loses:2d} mean reserved/pytorch {rel:.4f} mean churn {churn:.2f}")
    more = sum(r[3]['peak_reserved_bytes'] > r[2]['peak_reserved_bytes'] for r in sel)
    less = sum(r[3]['peak_reserved_bytes'] < r[2]['peak_reserved_bytes'] for r in sel)
    print(f"{group:8s} after holds more than before on {more}, less on {less}")
