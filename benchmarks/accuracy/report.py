"""Write the accuracy table of docs/accuracy.md: every suite trace, without its ranges, against them.

Usage: python benchmarks/accuracy/report.py [--real DIR] > table.md
Prints markdown: per trace, steps and layers found against the truth, each D4 group's share of
step busy time (truth -> found, in %), the largest gap, and the largest module-level gap; then
learned signatures applied to traces they were not learned from; then the real SGLang traces
(tests/data/sglang-real), which have no ranges: the structure against the signature written from
their kernel names.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from analysis.attribution.agreement import GROUPS, RangeTruth, compare_with_ranges, shares  # noqa: E402
from analysis.attribution.signature import load_signature  # noqa: E402
from analysis.api import AnalysisOptions, analyze  # noqa: E402
from benchmarks.accuracy.suite_cases import ROOT, bundled_cases, corpus_cases, public_cases  # noqa: E402
from tests.real_traces import real_traces_dir  # noqa: E402

SHORT = {"combine/share overlap": "shared", "communication": "comm"}
# (signature, the trace it was learned from, traces it was not learned from)
LEARNED = [
    ("embedded-hf-deepseek-v3-cuda", "embedded-h100-demo_gpu",
     ["embedded-h200-demo_gpu", "dsv3wide-h200-l4d1-e64k8-bs8-grouped-sdpa", "dsv3wide-h200-l4d1-e64k8-bs32-loop-sdpa"]),
    ("embedded-hf-deepseek-v3-cpu", "embedded-cpu-demo",
     ["dsv3-cpu-l4d1-e32k4-bs4-grouped-sdpa", "dsv3-cpu-l6d2-e64k6-bs4-loop-sdpa"]),
]


def _layers(layers, moe) -> str:
    if len(set(layers)) != 1 or len(set(moe)) != 1:
        return "/".join(str(n) for n in layers)
    if moe[0] is None:
        return f"{layers[0]}"
    return f"{layers[0] - moe[0]}+{moe[0]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", default=None,
                        help="folder of the public traces (default: where the tests find them, tests/real_traces.py)")
    args = parser.parse_args()
    cases = corpus_cases() + bundled_cases()
    real = Path(args.real) if args.real else real_traces_dir()
    public = public_cases(real) if real else []
    missing = [c.path.name for c in public if not c.path.exists()]
    if real is None or missing:
        print(f"note: public real traces missing ({', '.join(missing) or 'no folder found'}): "
              "get them with `python tests/real_traces.py fetch`", file=sys.stderr)
    cases += [c for c in public if c.path.exists()]
    head = ["trace", "hardware", "steps", "layers (dense+MoE)", *(SHORT.get(g, g) for g in GROUPS), "worst group",
            "worst module"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    results = {}
    for case in cases:
        r = compare_with_ranges(str(case.path), str(case.truth) if case.truth else None)
        results[case.name] = r
        worst_g, gap = r.worst_group
        module_gaps = r.module_gaps_pp()
        worst_m = max(module_gaps, key=lambda k: abs(module_gaps[k]))
        truth_steps = case.steps
        cells = [case.name + (" (graph)" if case.truth else ""), case.hardware,
                 f"{truth_steps} / {r.found.steps}",
                 f"{case.layers - case.moe_layers}+{case.moe_layers} / {_layers(r.found.layers, r.found.moe_layers)}"]
        for g in GROUPS:
            t, f = r.truth.groups.get(g, 0.0), r.found.groups.get(g, 0.0)
            cells.append("-" if t == 0 and f == 0 else f"{t:.1f} → {f:.1f}")
        cells.append(f"{SHORT.get(worst_g, worst_g)} {gap:+.2f}")
        cells.append(f"{worst_m[1]} {module_gaps[worst_m]:+.2f}")
        print("| " + " | ".join(cells) + " |")
    print()
    print("| learned signature | learned from | applied to | steps | layers | worst group gap (pp) |")
    print("|---|---|---|---|---|---|")
    paths = {c.name: c for c in cases}
    for sig, source, targets in LEARNED:
        for target in [source, *targets]:
            case = paths.get(target)
            if case is None:
                continue
            r = compare_with_ranges(str(case.path), signature=sig)
            g, gap = r.worst_group
            where = "(itself)" if target == source else target
            print(f"| {sig} | {source} | {where} | {case.steps} / {r.found.steps} | "
                  f"{case.layers} / {'/'.join(str(n) for n in r.found.layers)} | {SHORT.get(g, g)} {gap:+.2f} |")
    print()
    print("| real SGLang 0.5.17 trace (no ranges) | steps | layers (dense+MoE), structure | worst group gap against sglang-sm90-tp-fp8 (pp) |")
    print("|---|---|---|---|")
    for path in sorted((ROOT / "tests" / "data" / "sglang-real").glob("*.trace.json.gz")):
        found = analyze([str(path)], options=AnalysisOptions(layers=4))
        named = analyze([str(path)], signature="sglang-sm90-tp-fp8", options=AnalysisOptions(layers=4))
        a, b = (shares(r.kernel_rows, r.step_rows).groups for r in (named, found))
        group = max(set(a) | set(b), key=lambda g: abs(a.get(g, 0) - b.get(g, 0)))
        main = [s for s in found.step_rows if s.stage in ("decode", "target_verify")]
        layers = sorted({(s.layers_found - (s.moe_layers_found or 0), s.moe_layers_found) for s in main})
        print(f"| {path.name.split('-TP-')[0]} | {len(main)} | {', '.join(f'{d}+{m}' for d, m in layers)} | "
              f"{SHORT.get(group, group)} {b.get(group, 0) - a.get(group, 0):+.2f} |")
    print()
    print("| real SGLang 0.5.17 eager trace, against its own ranges | layered steps (truth) | "
          "sglang-sm90-tp-fp8: worst group (pp) | structure: worst group (pp) |")
    print("|---|---|---|---|")
    for path in sorted((ROOT / "tests" / "data" / "sglang-real" / "eager").glob("*.trace.json.gz")):
        cells = []
        ranges = RangeTruth(str(path))  # read and attributed once for both signatures
        for sig in ("sglang-sm90-tp-fp8", "generic"):
            r = ranges.against(load_signature(sig))
            g, gap = r.worst_group
            cells.append(f"{SHORT.get(g, g)} {gap:+.2f}" + ("" if r.layers_agree else " (layers differ)"))
        truth = r.truth
        print(f"| {path.name.split('-TP-')[0]} | {'/'.join(str(n) for n in truth.layered)} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
