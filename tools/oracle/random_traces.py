#!/usr/bin/env python3
"""Random allocation mixes for the PyTorch oracle, in the `action,id,size,stream` CSV format.

    python3 random_traces.py OUT_DIR

- random_borders: sizes clustered around the allocator's borders (512 B, 1 MiB small/large,
  10 MiB large-segment, 20 MiB, 128 MiB), random lifetimes, two streams.
- random_wide: log-uniform sizes from 1 B to 256 MiB, random lifetimes, one stream.

Ids are unique counters (the oracle replaces them with PyTorch's addresses). Deterministic.
"""

import math
import os
import random
import sys

MIB = 1 << 20
BORDERS = [512, MIB, 10 * MIB, 20 * MIB, 128 * MIB]


def border_size(rng):
    border = rng.choice(BORDERS)
    delta = rng.choice([-1, 1]) * int(border * rng.choice([0.0, 0.001, 0.01, 0.05, 0.2]) + rng.randint(0, 1024))
    return max(1, border + delta)


def wide_size(rng):
    return max(1, int(math.exp(rng.uniform(0, math.log(256 * MIB)))))


def generate(rng, ops, size_fn, streams, max_live_bytes):
    rows, live, next_id, live_bytes = [], [], 1, 0
    for _ in range(ops):
        if live and (rng.random() < 0.45 or live_bytes > max_live_bytes):
            ident, size, stream = live.pop(rng.randrange(len(live)))
            live_bytes -= size
            rows.append(f"free,{ident},{size},{stream}")
        else:
            size = size_fn(rng)
            stream = rng.randrange(streams)
            live.append((next_id, size, stream))
            live_bytes += size
            rows.append(f"alloc,{next_id},{size},{stream}")
            next_id += 1
    return rows


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    traces = {
        "random_borders": generate(random.Random(11), 20000, border_size, 2, 6 << 30),
        "random_wide": generate(random.Random(12), 20000, wide_size, 1, 6 << 30),
    }
    for name, rows in traces.items():
        with open(os.path.join(out, name + ".csv"), "w") as f:
            f.write("action,id,size,stream\n" + "\n".join(rows) + "\n")
        print(name, len(rows))


if __name__ == "__main__":
    main()
