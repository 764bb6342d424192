#!/usr/bin/env python3
"""Executions of single instructions in a callgrind profile made with --dump-instr=yes.

Usage: tools/callgrind_address_counts.py PROFILE ADDRESS [ADDRESS ...]
  ADDRESS: an instruction address in hex (as `objdump -d` prints it), e.g. 0x4e312c.

Prints each address and how many times the profiled code executed it (its Ir count: one
instruction, so its Ir is its execution count). Used to count how often a path runs, for
example the record shelf's buffer-handle swap in `Pool::place_on_device` (the first
`lock incq` of that path) against the function's entry (docs/BENCHMARKS.md, calls 51-52):

  valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file=p.out \\
      --toggle-collect='*gpu_replay::replay_once*' target/release/wgpool replay T --gpu \\
      --scale 16 --repeat 3 --keep-cache --json --conf expandable_segments:False
  objdump -d --no-show-raw-insn -C target/release/wgpool | awk \\
      '/<wgpool::pool::alloc::<impl wgpool::pool::Pool>::place_on_device>:$/{f=1} \\
       f&&/lock incq/{print} f&&/^$/{exit}'
  tools/callgrind_address_counts.py p.out ENTRY SWAP
"""
import collections
import sys


def step(token, old):
    """A position in callgrind's compressed notation: absolute, relative (+N/-N) or *."""
    if token == "*":
        return old
    if token[0] in "+-":
        value = token[1:]
        value = int(value, 16) if value.startswith("0x") else int(value)
        return old + value if token[0] == "+" else old - value
    return int(token, 0)


def counts(path):
    executed = collections.Counter()
    address = line = 0
    after_call = False
    with open(path) as profile:
        for raw in profile:
            if raw.startswith("positions:") and "instr" not in raw.split():
                sys.exit(f"{path}: no instruction addresses (profile with --dump-instr=yes)")
            if raw.startswith("calls="):
                # The next cost line is the call's inclusive cost, not an instruction's own.
                after_call = True
                continue
            if not raw.strip() or raw[0] not in "0123456789+-*":
                continue
            fields = raw.split()
            address = step(fields[0], address)
            line = step(fields[1], line)
            if after_call:
                after_call = False
                continue
            executed[address] += int(fields[2]) if len(fields) > 2 else 0
    return executed


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    executed = counts(sys.argv[1])
    for text in sys.argv[2:]:
        print(text, executed.get(int(text, 16), 0))


if __name__ == "__main__":
    main()
