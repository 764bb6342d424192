# The slack grid of 2026-12-06 (fifteenth session): `python3 docs/runs/slack-grid-2026-12-06.py BINARY`
# over gpt2-train, /tmp/synth (tools/synth_traces.py) and /tmp/oracle (tests/data/oracle, gunzipped).
import json,subprocess,glob,sys
traces=['/tmp/traces/gpt2-train.csv']+sorted(glob.glob('/tmp/synth/*.csv'))+sorted(glob.glob('/tmp/oracle/*.csv'))
confs=[('default',''),('s99r05','compact_page_slack:0.0099,compact_slack_ramp:0.05'),('s80r05','compact_slack_ramp:0.05'),('s99r30','compact_page_slack:0.0099'),('s99r10','compact_page_slack:0.0099,compact_slack_ramp:0.1'),('pytorch','policy:pytorch')]
binary=sys.argv[1]
out=open('/tmp/grid.jsonl','w')
for t in traces:
    name=t.split('/')[-1][:-4]
    line=[name[:28].ljust(28)]
    for label,c in confs:
        cmd=[binary,'replay',t,'--json']+(['--conf',c] if c else [])
        r=subprocess.run(cmd,capture_output=True,text=True)
        if r.returncode!=0:
            line.append(f'{label}: ERR'); continue
        d=json.loads(r.stdout); d['trace']=name; d['label']=label
        out.write(json.dumps({k:v for k,v in d.items() if not isinstance(v,(dict,list))})+'\n')
        line.append(f"{label} r{d['ratio']:.4f} c{d['churn']:.3f} s{d['segments_created']} {d['ns_per_op_median']:.0f}ns")
    print(' | '.join(line), flush=True)
