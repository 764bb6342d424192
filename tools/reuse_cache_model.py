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

`--locked` prints instead the locked (atomic read-modify-write) operations per trace
operation that the pool's allocations and frees take, under the rules before 2026-12-06's
eleventh session and after it (`locked_ops`): a take or a park is one (the cache's flag),
the pool's lock two (lock and unlock), a drain of a non-empty cache one, a reference cloned
or dropped one. After: references of drained blocks are banked and taken back by later
misses, and a free the full cache refuses drains it under the lock it takes. A take whose
size's bit is set but finds no block (one more) is not modelled, in either.
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


def locked_ops(path, scale, capacity, banked):
    """Locked operations per trace operation, before (`banked` False) or after the bank and
    the full cache's drain."""
    live, parked = {}, []
    ops = locked = bank = 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            ops += 1
            size = -(-int(row["size"] or 0) // scale)
            if row["action"] == "alloc":
                at = next((i for i in range(len(parked) - 1, -1, -1) if parked[i] == size), None)
                if at is not None:
                    parked.pop(at)
                    locked += 1  # take
                else:
                    locked += 2  # the pool's lock
                    if parked:
                        locked += 1  # drain
                    if banked:
                        bank += len(parked)
                        if bank:
                            bank -= 1
                        else:
                            locked += 1  # clone
                    else:
                        # The last drained reference is kept; the others drop; none: clone.
                        locked += max(len(parked) - 1, 0) + (not parked)
                    parked = []
                live[row["id"]] = size
            elif row["action"] == "free" and row["id"] in live:
                size = live.pop(row["id"])
                locked += 1  # park (or its refusal)
                if len(parked) < capacity:
                    parked.append(size)
                elif banked:
                    locked += 2 + 1 + 1  # lock, drain, this block's reference dropped
                    bank += len(parked)
                    parked = []
                else:
                    locked += 2 + 1  # lock, reference dropped
    return locked / max(ops, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--scale", type=int, default=16)
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--drain", choices=["miss", "kind", "never"], default="miss")
    parser.add_argument("--locked", action="store_true",
                        help="locked operations per operation, before and after the bank")
    args = parser.parse_args()
    if args.locked:
        for path in args.traces:
            before = locked_ops(path, args.scale, args.capacity, False)
            after = locked_ops(path, args.scale, args.capacity, True)
            print(f"{path}: locked operations per operation {before:.2f} before, "
                  f"{after:.2f} after ({after - before:+.2f})")
        return
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
