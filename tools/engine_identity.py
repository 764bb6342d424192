#!/usr/bin/env python3
"""Check that two wgpool binaries place every allocation of every trace identically.

Usage: tools/engine_identity.py BASE_BINARY HEAD_BINARY TRACE...

For each trace and each configuration ("" (the default), "policy:pytorch",
"expandable_segments:False", "policy:pytorch,expandable_segments:True",
"roundup_power2_divisions:4,max_split_size_mb:64"), runs
`BINARY replay TRACE --json --stats --snapshot FILE` with both binaries and compares the
JSON report with its timing fields removed (keys holding `ns`, `seconds` or ending in `_s`)
and the SHA-256 of the snapshot pickle, which records every block's address over the whole
replay. Prints one line per difference and a summary; exits 1 if anything differs.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile

CONFS = [
    "",
    "policy:pytorch",
    "expandable_segments:False",
    "policy:pytorch,expandable_segments:True",
    "roundup_power2_divisions:4,max_split_size_mb:64",
]


def is_timing(key):
    return "ns" in key.split("_") or "seconds" in key or key.endswith("_s") or "timed" in key


def strip(value):
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if not is_timing(k)}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def run(binary, trace, conf, snapshot):
    command = [binary, "replay", trace, "--json", "--stats", "--snapshot", snapshot]
    if conf:
        command += ["--conf", conf]
    env = dict(os.environ)
    env.pop("WGPOOL_CONF", None)
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    with open(snapshot, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return strip(json.loads(out.stdout)), digest


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    base, head, traces = sys.argv[1], sys.argv[2], sys.argv[3:]
    differ = checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        snap = os.path.join(tmp, "s.pickle")
        for trace in traces:
            for conf in CONFS:
                a = run(base, trace, conf, snap)
                b = run(head, trace, conf, snap)
                checked += 1
                if a != b:
                    differ += 1
                    what = "snapshot" if a[0] == b[0] else "report"
                    print(f"DIFFER {what}: {trace} conf={conf!r}")
    print(f"{checked} runs compared, {differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
