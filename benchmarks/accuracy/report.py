"""Write the accuracy tables of docs/accuracy.md: every suite trace, without its ranges, against
a truth that shares no code with the analysis (tests/accuracy/truth.py).

Usage: python benchmarks/accuracy/report.py [--real DIR] > tables.md
Prints markdown: per trace, steps and layers found against the truth, each D4 group's share of
step busy time (truth -> found, in %), the largest group gap, and where the trace came from
against the code it checks (git history); then each D4 row the truth names (truth -> found);
then learned signatures on traces they were not learned from; then the real SGLang traces
(tests/data/sglang-real): the graph replays (no ranges) with the structure against the signature
written from their kernel names, and the eager traces against the truth.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "tests"))
from accuracy import table as T  # noqa: E402
from accuracy.judge import judge, judge_case, module_names  # noqa: E402
from accuracy.tool import found_of  # noqa: E402
from accuracy.truth import compare, truth_of  # noqa: E402
from analysis.attribution.rank.agreement import GROUPS, shares  # noqa: E402
from analysis.api import AnalysisOptions, analyze  # noqa: E402
from benchmarks.accuracy.suite_cases import ROOT, bundled_cases, corpus_cases, public_cases  # noqa: E402
from tests.real_traces import real_traces_dir  # noqa: E402

SHORT = {"combine/share overlap": "shared", "communication": "comm"}
# (signature, the trace it was learned from, traces it was not learned from): scored only on the latter
LEARNED = [
    ("embedded-hf-deepseek-v3-cuda", "embedded-h100-demo_gpu",
     ["embedded-h200-demo_gpu", "dsv3wide-h200-l4d1-e64k8-bs8-grouped-sdpa", "dsv3wide-h200-l4d1-e64k8-bs32-loop-sdpa"]),
    ("embedded-hf-deepseek-v3-cpu", "embedded-cpu-demo",
     ["dsv3-cpu-l4d1-e32k4-bs4-grouped-sdpa", "dsv3-cpu-l3d1-e64k8-bs16-grouped-sdpa", "dsv3-cpu-l6d2-e64k6-bs4-loop-sdpa"]),
]
CHECKED_CODE = "analysis"  # the code the suite checks


def _layers(layers, moe) -> str:
    if len(set(layers)) != 1 or len(set(moe)) != 1:
        return "/".join(str(n) for n in layers)
    if moe[0] is None:
        return f"{layers[0]}"
    return f"{layers[0] - moe[0]}+{moe[0]}"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()


def provenance(path: Path) -> str:
    """When the trace entered the repository, against the analysis it checks: commits to analysis/
    after it was added mean the code was written or tuned with the trace at hand (not held out)."""
    rel = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else None
    if rel is None:
        return "public, beside the checkout (not in the repository): at hand while the code was written"
    added = _git("log", "--diff-filter=A", "--format=%h %as", "--", str(rel)).splitlines()
    if not added:
        return "not committed"
    commit, day = added[-1].split()
    after = int(_git("rev-list", "--count", f"{commit}..HEAD", "--", CHECKED_CODE) or 0)
    last = _git("log", "-1", "--format=%as", "--", CHECKED_CODE)
    if after == 0:
        return f"added {day} ({commit}); analysis/ unchanged since: recorded after the code it checks"
    return f"added {day} ({commit}); {after} commits changed analysis/ since (last {last}): changed with it at hand"


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
            "rows off"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    judged = {}
    for case in cases:
        j = judged[case.name] = judge_case(case) if case.origin != "public" else judge(str(case.path))
        gaps = {g: j.found_groups.get(g, 0.0) - j.truth_groups.get(g, 0.0) for g in GROUPS}
        worst_g = max(GROUPS, key=lambda g: abs(gaps[g]))
        off = [p.split(":")[0].removeprefix("row ") for p in compare(j.truth_groups, j.truth_rows, j.found_groups,
                                                                      j.found_rows) if p.startswith("row ")]
        cells = [case.name + (" (graph)" if case.truth else ""), case.hardware,
                 f"{j.truth_steps} / {j.found_steps}" + (" (layered)" if j.found_steps != j.truth_steps else ""),
                 f"{_layers(j.truth_layers, j.truth_moe_layers)} / "
                 f"{_layers(j.found_layered, [m for n, m in zip(j.found_layers, j.found_moe_layers) if n])}"]
        for g in GROUPS:
            t, f = j.truth_groups.get(g, 0.0), j.found_groups.get(g, 0.0)
            cells.append("-" if t == 0 and f == 0 else f"{t:.1f} → {f:.1f}")
        cells.append(f"{SHORT.get(worst_g, worst_g)} {gaps[worst_g]:+.2f}")
        cells.append(", ".join(off) or "none")
        print("| " + " | ".join(cells) + " |")
    print()
    rows = list(T.COMPARED_ROWS)
    print("| trace | " + " | ".join(rows) + " |")
    print("|" + "---|" * (len(rows) + 1))
    for case in cases:
        j = judged[case.name]
        cells = [case.name]
        for name in rows:
            t = sum(j.truth_rows.get(k, 0.0) for k in T.COMPARED_ROWS[name])
            f = sum(j.found_rows.get(k, 0.0) for k in T.COMPARED_ROWS[name])
            cells.append("-" if t < 0.005 and f < 0.005 else f"{t:.1f} → {f:.1f}")
        print("| " + " | ".join(cells) + " |")
    print()
    print("| trace | where it came from, against the analysis it checks (git log) |")
    print("|---|---|")
    for case in cases:
        print(f"| {case.name} | {provenance(case.path)} |")
    print()
    print("| learned signature | learned from | applied to (not learned from) | steps | layers | worst group gap (pp) | rows off |")
    print("|---|---|---|---|---|---|---|")
    paths = {c.name: c for c in cases}
    for sig, source, targets in LEARNED:
        for target in targets:
            case = paths.get(target)
            if case is None:
                continue
            t = truth_of(str(case.path), module_names(case.meta))
            f = found_of(str(case.path), sig)
            tg = t.group_shares()
            g = max(GROUPS, key=lambda g: abs(f.groups.get(g, 0.0) - tg.get(g, 0.0)))
            off = [p.split(":")[0].removeprefix("row ") for p in compare(tg, t.row_shares(), f.groups, f.rows)
                   if p.startswith("row ")]
            print(f"| {sig} | {source} | {target} | {t.steps} / {f.steps} | "
                  f"{case.layers} / {'/'.join(str(n) for n in f.layers)} | "
                  f"{SHORT.get(g, g)} {f.groups.get(g, 0.0) - tg.get(g, 0.0):+.2f} | {', '.join(off) or 'none'} |")
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
    print("| real SGLang 0.5.17 eager trace, against the truth | layered steps (truth) | "
          "sglang-sm90-tp-fp8: worst group (pp) | structure: worst group (pp) | structure: rows off |")
    print("|---|---|---|---|---|")
    for path in sorted((ROOT / "tests" / "data" / "sglang-real" / "eager").glob("*.trace.json.gz")):
        t = truth_of(str(path))
        tg, cells = t.group_shares(), []
        for sig in ("sglang-sm90-tp-fp8", "generic"):
            f = found_of(str(path), sig)
            g = max(GROUPS, key=lambda g: abs(f.groups.get(g, 0.0) - tg.get(g, 0.0)))
            layered = [n for n in f.layers if n] == t.layers
            cells.append(f"{SHORT.get(g, g)} {f.groups.get(g, 0.0) - tg.get(g, 0.0):+.2f}"
                         + ("" if layered else " (layers differ)"))
        off = [p.split(":")[0].removeprefix("row ") for p in compare(tg, t.row_shares(), f.groups, f.rows)
               if p.startswith("row ")]
        print(f"| {path.name.split('-TP-')[0]} | {'/'.join(str(n) for n in t.layers)} | {cells[0]} | {cells[1]} | "
              f"{', '.join(off) or 'none'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
