# A training loop from one recorded step: writes a wgpool CSV trace that replays TRACE's
# operations N times in a row, as a training loop runs the same step with the pool's cache
# kept. Each repetition's ids are moved to a range of their own (id + k * 2**50), and what a
# repetition leaves allocated is freed at its end, as `replay --gpu --repeat N --keep-cache`
# frees what a run leaves. Twenty-fifth session, 2026-12-07.
# Usage: python3 docs/runs/repeat-trace-2026-12-07.py TRACE N OUT
import csv, sys

trace, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = list(csv.reader(open(trace)))
header, body = rows[0], rows[1:]
left = {}
for row in body:
    if row[0] == 'alloc':
        left[row[1]] = row
    elif row[0] == 'free':
        left.pop(row[1], None)
    else:
        sys.exit(f"{trace}: a `{row[0]}` row; only alloc and free rows are repeated")
with open(out, 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(header)
    for k in range(steps):
        shift = k << 50
        for row in body:
            w.writerow([row[0], int(row[1]) + shift] + row[2:])
        for row in left.values():
            w.writerow(['free', int(row[1]) + shift] + row[2:])
