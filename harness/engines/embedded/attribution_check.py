"""Does the hand-written signature name kernels as the trace's own module ranges do?

`python -m harness.engines.embedded.attribution_check TRACE [--signature NAME] [--tolerance-pct 2]`
prints, per (group, module), the layer time attributed by the signature template and by module
ranges, and exits 1 when any module differs by more than the tolerance (of that module's time).
Eager traces of the embedded engine carry module ranges, so they are the ground truth here.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from analysis.api import AnalysisOptions, attribute


def per_module_us(trace: str, signature: str, mode: str) -> dict[tuple[str, str], float]:
    """Layer busy time per (group, module) of the trace file attributed in one mode (template or modules)."""
    rows = attribute([trace], signature=signature, options=AnalysisOptions(attribution=mode, jobs=1))
    total: dict[tuple[str, str], float] = defaultdict(float)
    for r in rows.kernel_rows:
        if r.section == "layer":
            total[(r.group, r.module)] += r.busy_us
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--signature", default="embedded-hf-deepseek-v3-cuda")
    parser.add_argument("--tolerance-pct", type=float, default=2.0)
    args = parser.parse_args(argv)
    template = per_module_us(args.trace, args.signature, "template")
    modules = per_module_us(args.trace, args.signature, "modules")
    worst = 0.0
    print("| group | module | template us | module ranges us | diff % |\n|---|---|---|---|---|")
    for key in sorted(set(template) | set(modules)):
        a, b = template.get(key, 0.0), modules.get(key, 0.0)
        diff = abs(a - b) / b * 100 if b else (0.0 if a == 0 else float("inf"))
        worst = max(worst, diff)
        print(f"| {key[0]} | {key[1]} | {a:.1f} | {b:.1f} | {diff:.2f} |")
    ok = worst <= args.tolerance_pct
    print(f"\nworst per-module difference {worst:.2f}% ({'within' if ok else 'above'} {args.tolerance_pct}%)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
