#!/usr/bin/env python3
"""A model of the GPU pool's reuse cache over a trace: how many allocations it would serve
without the engine, and how often blocks' pool references are dropped and cloned.

Usage: tools/reuse_cache_model.py [--scale N] [--capacity N] [--drain miss|kind|never] TRACE...

The model follows `src/pool/reuse_cache.rs`: a freed block parks (up to `--capacity`, 32 as
in the pool; past it, it is freed through the engine); an allocation takes the most recently
parked block of exactly its requested size (sizes divided by `--scale`, rounded up, as
`replay --gpu --scale` does). On a miss, `--drain miss` (the pool's rule) returns every parked
block to the engine; `kind` only those of the request's pool (small: at most 1 MiB, as
PyTorch's); `never` none (parked blocks leave only when the cache is full, oldest first).

Prints per trace: allocations, the share the cache serves, and, for the pool's rule, the
reference counts a block's pool reference costs: drops when a drain returns several blocks
(all but one), clones when a miss finds the cache empty, drops of blocks freed past a full
cache. Standard library only; wgpool CSV traces (`action,id,size,stream`).
"""

import argparse
import csv

SMALL = 1 << 20


def model(path, scale, capacity, drain):
    live, parked = {}, []
    allocs = hits = drops = clones = direct = 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            size = -(-int(row["size"] or 0) // scale)
            if row["action"] == "alloc":
                allocs += 1
                at = next((i for i in range(len(parked) - 1, -1, -1) if parked[i] == size), None)
                if at is not None:
                    parked.pop(at)
                    hits += 1
                else:
                    if drain == "miss":
                        drops += max(len(parked) - 1, 0)
                        clones += not parked
                        parked = []
                    elif drain == "kind":
                        parked = [p for p in parked if (p <= SMALL) != (size <= SMALL)]
                live[row["id"]] = size
            elif row["action"] == "free" and row["id"] in live:
                size = live.pop(row["id"])
                if len(parked) < capacity:
                    parked.append(size)
                elif drain == "never":
                    parked.pop(0)
                    parked.append(size)
                else:
                    direct += 1
    return allocs, hits, drops, clones, direct


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--scale", type=int, default=16)
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--drain", choices=["miss", "kind", "never"], default="miss")
    args = parser.parse_args()
    for path in args.traces:
        allocs, hits, drops, clones, direct = model(path, args.scale, args.capacity, args.drain)
        line = f"{path}: {allocs} allocations, {100 * hits / max(allocs, 1):.1f}% served"
        if args.drain == "miss":
            ops = None
            with open(path) as f:
                ops = sum(1 for _ in f) - 1
            line += (f"; per operation: {drops / ops:.2f} reference drops in drains, "
                     f"{clones / ops:.2f} clones, {direct / ops:.2f} frees past a full cache")
        print(line)


if __name__ == "__main__":
    main()
