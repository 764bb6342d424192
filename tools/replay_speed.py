#!/usr/bin/env python3
"""Engine time per op of two `wgpool` builds on one trace, as ratios, on a noisy machine.

Usage: tools/replay_speed.py BASELINE_BINARY BINARY [--trace FILE] [--rounds N]

A shared machine's speed moves from hour to hour, so absolute `ns_per_op` figures taken at
different times cannot be compared. This runs `wgpool replay TRACE --json [--conf C]` for
each configuration of both binaries in turn, the order rotated every round, and prints per
configuration: the fastest `ns_per_op` over all invocations (each invocation reports the
fastest of its own timed runs: the least disturbed figure), the median of the invocations'
`ns_per_op_median`, and the ratios of both to the baseline binary's default and
`policy:pytorch` rows. The baseline binary is only given configurations it parses (no
`expandable_segments` before pages mode).
"""

import argparse
import json
import statistics
import subprocess

# (name, binary, --conf or None)
CASES = [
    ("baseline default", "base", None),
    ("baseline policy:pytorch", "base", "policy:pytorch"),
    ("default (pages)", "head", None),
    ("expandable_segments:False", "head", "expandable_segments:False"),
    ("policy:pytorch", "head", "policy:pytorch"),
    ("policy:pytorch,expandable_segments:True", "head", "policy:pytorch,expandable_segments:True"),
]
BASELINES = ["baseline default", "baseline policy:pytorch"]


def run(binary, trace, conf):
    command = [binary, "replay", trace, "--json"] + (["--conf", conf] if conf else [])
    report = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline")
    parser.add_argument("binary")
    parser.add_argument("--trace", default="tests/data/gpt2-train.csv")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    binaries = {"base": args.baseline, "head": args.binary}
    results = {name: [] for name, _, _ in CASES}
    layout = {}
    for round_index in range(args.rounds):
        shift = round_index % len(CASES)
        for name, which, conf in CASES[shift:] + CASES[:shift]:
            report = run(binaries[which], args.trace, conf)
            results[name].append((report["ns_per_op"], report["ns_per_op_median"]))
            layout[name] = (report["peak_reserved_bytes"], report["segments_created"])
    summary = {
        name: (min(f for f, _ in runs), statistics.median(m for _, m in runs))
        for name, runs in results.items()
    }
    print(f"{args.rounds} rounds on {args.trace}; ratios are fastest, median")
    print(
        "| configuration | fastest ns/op | median ns/op | / baseline default "
        "| / baseline policy:pytorch | peak reserved | maps or segments |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, which, _ in CASES:
        fastest, median = summary[name]
        ratios = []
        for baseline in BASELINES:
            base_fastest, base_median = summary[baseline]
            ratios.append(f"{fastest / base_fastest:.3f}, {median / base_median:.3f}")
        if which == "base":
            ratios = ["", ""]
        peak, created = layout[name]
        print(
            f"| {name} | {fastest:.1f} | {median:.1f} | {ratios[0]} | {ratios[1]} "
            f"| {peak:,} | {created} |"
        )

if __name__ == "__main__":
    main()
