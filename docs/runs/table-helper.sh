# The prologue and the PyTorch and b244e2c replays that issue 21's table calls share (calls
# 60, 62, 63, 64), sourced from the repository root on the device machine: the device's
# set-up (device-env.sh), what the machine is, the builds' commits, the traces
# (prepare-traces.sh; ONLY_TRACES="..." keeps only those), `wg` (replay-helper.sh), and:
#   torch TRACE CONF  PyTorch's caching allocator from C++ (`--repeat 5`), a line appended to
#                     $OUT/torch.jsonl
#   old TRACE CONF    b244e2c's replay (`.dev/wgpool-old`, one run), appended to
#                     $OUT/replay.jsonl
# Both read $round.
. docs/runs/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
nproc; lscpu | grep -E "Model name" || true
python3 -c "import torch; print('torch', torch.__version__)" 2>/dev/null
cat .dev/COMMIT .dev/COMMIT-prev
. docs/runs/prepare-traces.sh
TRACES=${ONLY_TRACES:-$TRACES}
. docs/runs/replay-helper.sh
: > "$OUT/torch.jsonl"
torch() {
  PYTORCH_CUDA_ALLOC_CONF=$2 timeout 120 python3 tools/oracle/torch_alloc_speed.py /tmp/traces/$1.csv --repeat 5 \
    2>/dev/null | python3 -c "
import json,sys
r=json.loads(sys.stdin.read()); r['round']='$round'
open('$OUT/torch.jsonl','a').write(json.dumps(r)+'\n')
print('$round torch $1 %s first %.3f s rest %.3f s' % (r['conf'] or 'native', r['first_s'], r['rest_median_s']))"
}
old() {
  out=$(timeout 90 .dev/wgpool-old replay /tmp/traces/$1.csv --gpu --json --conf "$2" 2>/dev/null)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']='$round'; r['conf_given']='$2'; r['args']=''; r['build']='wgpool-old'
print(json.dumps(r))
print('$round old $1 $2 wall %.3f drv %.3f dev %.3f GB' % (r['wall_time_s'], r['driver_time_s'], r['device_memory_peak_bytes']/1e9), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2 old: no report"
}
