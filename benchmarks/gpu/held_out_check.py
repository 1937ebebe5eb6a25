"""Per-module agreement of a learned template with module ranges, on steps it was not learned from.

    python benchmarks/gpu/held_out_check.py TRACE LEARNED.yaml 0,1
Prints a per-module table for the held-out steps and exits 1 when a module differs by more than 2%
of its own time.
"""
import sys
from collections import defaultdict

from analysis.attribution.rank.attribute import RankOptions, attribute_rank
from analysis.attribution.signature import load_signature
from analysis.ingest.trace_loader import load_trace


def main() -> int:
    trace_path, sig_path, learned_steps = sys.argv[1], sys.argv[2], {int(s) for s in sys.argv[3].split(",")}
    trace, sig = load_trace(trace_path), load_signature(sig_path)
    totals = {}
    for mode in ("template", "modules"):
        rows, steps = attribute_rank(trace, sig, None, RankOptions(attribution=mode))
        print(mode, "layers per step:", [s.layers_found for s in steps])
        acc = defaultdict(float)
        for r in rows:
            if r.section == "layer" and r.step not in learned_steps:
                acc[(r.group, r.module)] += r.busy_us
        totals[mode] = acc
    worst = 0.0
    print("| group | module | template us | module ranges us | diff % |\n|---|---|---|---|---|")
    for key in sorted(set(totals["template"]) | set(totals["modules"])):
        a, b = totals["template"].get(key, 0.0), totals["modules"].get(key, 0.0)
        pct = 100 * abs(a - b) / b if b else (0.0 if not a else float("inf"))
        worst = max(worst, pct)
        print(f"| {key[0]} | {key[1]} | {a:.1f} | {b:.1f} | {pct:.2f} |")
    print(f"worst per-module difference {worst:.2f}% on held-out steps")
    return 0 if worst <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
