# Churn (bytes mapped over peak live) and peak reserved / peak live of one wgpool binary (pages mode,
# the default configuration or CONF) over the 103-trace set but its synthetic random mixes (the
# oracle files, four recorded random mixes among them, included) plus the held-out ResNet and
# BERT files (/tmp/hov); a line ends in '<<' where churn is above 1.5 or the
# ratio above 1.01 (issue 21's bars). Twenty-first session, 2026-12-07.
# Usage: python3 docs/runs/churn-2026-12-07.py BINARY [CONF]
import glob, json, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
b = sys.argv[1]; conf = sys.argv[2] if len(sys.argv)>2 else ''
traces = ['/tmp/traces/gpt2-train.csv'] + [t for t in sorted(glob.glob('/tmp/synth/*.csv')) if 'random-mix' not in t] + [t for s in ('s101','s202') for t in sorted(glob.glob(f'/tmp/ho/{s}/*.csv')) if 'random-mix' not in t] + sorted(glob.glob('/tmp/oracle/*.csv')) + sorted(glob.glob('/tmp/hov/*.csv'))
def run(t):
    a=[b,'replay',t,'--json','--device-memory-bytes','150109880320'] + (['--conf',conf] if conf else [])
    r=subprocess.run(a,capture_output=True,text=True)
    return t, json.loads(r.stdout) if r.returncode==0 else None
for t,d in ThreadPoolExecutor(2).map(run, traces):
    n='/'.join(t.split('/')[-2:])[:-4]
    if d is None: print(n,'ERR'); continue
    flag = ' <<' if d['churn']>1.5 or d['ratio']>1.01 else ''
    print(f"{n:45s} churn {d['churn']:.3f} ratio {d['ratio']:.4f} maps {d['segments_created']}{flag}")
