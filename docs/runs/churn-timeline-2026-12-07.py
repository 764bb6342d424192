# Where a replay's remapping happens: reads the PyTorch memory snapshot that `wgpool replay
# TRACE --snapshot FILE` writes and prints, every N events of its device trace, live memory,
# the running peak of live memory, physical (mapped) memory, and the bytes mapped and
# unmapped so far (MiB), with the bytes mapped over the running peak. Twenty-fourth session,
# 2026-12-07 (`tinyllama-ft-ckpt-accum` s101, whose churn is 1.521).
# Usage: python3 docs/runs/churn-timeline-2026-12-07.py SNAPSHOT [N]
import pickle, sys
snapshot = pickle.load(open(sys.argv[1], 'rb'))
every = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
events = snapshot['device_traces'][0]
live = peak = physical = mapped = unmapped = 0
mib = lambda b: b / 2**20
print(f"{'event':>7} {'live':>7} {'peak':>7} {'physical':>9} {'mapped':>8} {'unmapped':>9} mapped/peak")
for i, e in enumerate(events, 1):
    action = e['action']
    if action == 'alloc':
        live += e['size']; peak = max(peak, live)
    elif action == 'free_completed':
        live -= e['size']
    elif action == 'segment_map':
        mapped += e['size']; physical += e['size']
    elif action == 'segment_unmap':
        unmapped += e['size']; physical -= e['size']
    if i % every == 0 or i == len(events):
        print(f"{i:7d} {mib(live):7.0f} {mib(peak):7.0f} {mib(physical):9.0f} {mib(mapped):8.0f} "
              f"{mib(unmapped):9.0f} {mapped / max(peak, 1):.2f}")
