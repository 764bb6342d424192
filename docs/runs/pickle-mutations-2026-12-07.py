# Robustness of the snapshot reader: replays N random mutations of a PyTorch snapshot pickle
# (bytes changed, cut, repeated or zeroed) and counts the exit codes; any code but 0 (the
# mutation still reads) and 2 (a clear error) is a defect, and its input is kept as
# bad<i>.pickle. Twenty-fourth session, 2026-12-07: the snapshot of `wgpool replay
# /tmp/traces/gpt2-train.csv --snapshot small.pickle --history-entries 3000`, 600 mutations,
# seed 7: 569 exit 2, 31 exit 0.
# Usage: python3 docs/runs/pickle-mutations-2026-12-07.py BINARY SNAPSHOT [N] [SEED]
import random, subprocess, sys
binary, source = sys.argv[1:3]
count = int(sys.argv[3]) if len(sys.argv) > 3 else 600
random.seed(int(sys.argv[4]) if len(sys.argv) > 4 else 7)
data = open(source, 'rb').read()
codes = {}
for i in range(count):
    b = bytearray(data)
    kind = random.choice(['flip', 'trunc', 'dup', 'zero'])
    if kind == 'flip':
        for _ in range(random.randint(1, 8)):
            b[random.randrange(len(b))] = random.randrange(256)
    elif kind == 'trunc':
        b = b[:random.randrange(len(b))]
    elif kind == 'dup':
        j = random.randrange(len(b)); n = random.randint(1, 64); b[j:j] = b[j:j + n]
    else:
        j = random.randrange(len(b)); n = random.randint(1, 64); b[j:j + n] = bytes(n)
    open('m.pickle', 'wb').write(b)
    try:
        code = subprocess.run([binary, 'replay', 'm.pickle', '--json'], capture_output=True,
                              timeout=20).returncode
    except subprocess.TimeoutExpired:
        code = 'timeout'
    codes[code] = codes.get(code, 0) + 1
    if code not in (0, 2):
        open(f'bad{i}.pickle', 'wb').write(b)
print(codes)
