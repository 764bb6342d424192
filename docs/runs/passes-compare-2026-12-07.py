# A training loop over many traces: `wgpool replay TRACE --compare --passes N --json` for each
# trace named, and the default's peak reserved / peak live and churn beside PyTorch's native
# allocator and its expandable segments (each as the engine models it), with the default's
# one-pass figures. Twenty-fifth session, 2026-12-07.
# Usage: python3 docs/runs/passes-compare-2026-12-07.py BINARY N TRACE...
import json, subprocess, sys

binary, passes, traces = sys.argv[1], sys.argv[2], sys.argv[3:]
def compare(trace, n):
    out = subprocess.run([binary, 'replay', trace, '--compare', '--passes', n, '--json'],
                         capture_output=True, text=True, check=True).stdout
    return {row['name']: row['report'] for row in json.loads(out)['rows']}
print(f"{'trace':34s} {'default, 1 pass':>16s} {'default, ' + passes + ' passes':>22s} "
      f"{'expandable':>16s} {'native':>16s}  (ratio, churn)")
worse = 0
for trace in traces:
    one, many = compare(trace, '1'), compare(trace, passes)
    cell = lambda r: f"{r['ratio']:.4f}, {r['churn']:.2f}" if r else 'error'
    d, e = many['wgpool default'], many['PyTorch expandable segments']
    mark = ' *' if d and e and d['ratio'] >= e['ratio'] else ''
    worse += bool(mark)
    name = '/'.join(trace.split('/')[-2:])[:-4]
    print(f"{name[:34]:34s} {cell(one['wgpool default']):>16s} {cell(d):>22s} {cell(e):>16s} "
          f"{cell(many['PyTorch native']):>16s}{mark}")
print(f"{worse} of {len(traces)} traces: the default holds at least as much as PyTorch's "
      f"expandable segments over {passes} passes (*)")
