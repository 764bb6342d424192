# The four traces of issue 21 in /tmp/traces, sourced from the repository root on the device
# machine (`. docs/runs/prepare-traces.sh`, after device-env.sh): the GPT-2 training trace
# from tests/data and three synthetic ones (tools/synth_traces.py), named in $TRACES.
mkdir -p /tmp/traces
cp tests/data/gpt2-train.csv /tmp/traces/
python3 tools/synth_traces.py /tmp/traces kv-decode-cat resnet50-amp bert-base-varlen > /dev/null
TRACES="gpt2-train resnet50-amp bert-base-varlen kv-decode-cat"
