#!/usr/bin/env python3
"""The default policy's engine cost against `policy:pytorch`, per trace, on a noisy machine.

Usage: tools/engine_cost.py [--base BINARY] [--rounds N] BINARY TRACE...

For each trace, runs `BINARY replay TRACE --json` (the default) and
`BINARY replay TRACE --json --conf policy:pytorch` in turn, the order alternating every
round (and, with `--base`, the same two with the baseline binary), and prints one Markdown
row per trace and binary: the median over the rounds of each invocation's
`ns_per_op_median` for both configurations, their ratio (default / pytorch: at most 1 is
the goal of issue 21), and the default's memory figures (`mapped_bytes_total` and
`peak_reserved_bytes` over `peak_live_bytes`). Ratios are taken inside one binary and one
round, so that the machine's speed, which moves from minute to minute on a shared
machine, cancels out; the median of the per-round ratios is printed beside the ratio of
the medians.
"""

import argparse
import json
import os
import statistics
import subprocess


def replay(binary, trace, conf):
    command = [binary, "replay", trace, "--json"] + (["--conf", conf] if conf else [])
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(result.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--base", help="a baseline binary, measured in the same rounds")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    binaries = [("base", args.base)] if args.base else []
    binaries.append(("head", args.binary))
    print(
        f"{args.rounds} rounds; ns/op: median over rounds of each run's ns_per_op_median; "
        "ratio: default / policy:pytorch (of the medians; median of the per-round ratios)"
    )
    print(
        "| trace | build | default ns/op | pytorch ns/op | ratio | per-round ratio "
        "| mapped / peak live | peak reserved / peak live |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for trace in args.traces:
        name = os.path.basename(trace).removesuffix(".csv")
        times = {(b, c): [] for b, _ in binaries for c in ("default", "pytorch")}
        memory = {}
        for round_index in range(args.rounds):
            order = [(b, path, c) for b, path in binaries for c in ("default", "pytorch")]
            if round_index % 2:
                order.reverse()
            for build, path, conf in order:
                report = replay(path, trace, "policy:pytorch" if conf == "pytorch" else None)
                times[(build, conf)].append(report["ns_per_op_median"])
                if conf == "default":
                    live = report["peak_live_bytes"]
                    memory[build] = (
                        report["mapped_bytes_total"] / live,
                        report["peak_reserved_bytes"] / live,
                    )
        for build, _ in binaries:
            default = times[(build, "default")]
            pytorch = times[(build, "pytorch")]
            per_round = statistics.median(d / p for d, p in zip(default, pytorch))
            d, p = statistics.median(default), statistics.median(pytorch)
            mapped, ratio = memory[build]
            print(
                f"| {name} | {build} | {d:.1f} | {p:.1f} | {d / p:.2f} | {per_round:.2f} "
                f"| {mapped:.3f} | {ratio:.4f} |"
            )


if __name__ == "__main__":
    main()
