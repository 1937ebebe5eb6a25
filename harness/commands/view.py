"""`moe-harness view`: one HTML page a user opens, and the annotated traces for Perfetto.

Input is a run directory (analysis/ inside) or an analysis folder, and optionally runs to compare
it with. The page (analysis/report/page/) needs per-kernel timing for its layer bars, timeline and
heat map: the folder's kernel table (kernels_long.parquet, or an older analysis's kernels_long.csv)
where it has one, else the run's traces analysed again (analysis/saved_analysis.py says how,
and the page says which). Writes into --out (default RUN_OR_ANALYSIS_DIR/view, a folder of its
own): view.html; with a run directory's traces, each trace with its attribution added
(annotated-<trace name>); and kernels_long.parquet when the kernels were derived from the traces, so
the page's links hold.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands import COMMANDS
from harness.output_dir import OutputError, prepare_output

def register(subparsers) -> None:
    p = subparsers.add_parser(
        "view", help=COMMANDS["view"],
        description="One HTML page (inline SVG, no script, opens offline): the D4 table (English / Chinese) with its "
                    "self-check verdict, what changed against COMPARE_WITH runs (docs/analysis.md, 'What changed'), "
                    "per-layer bars by group (dense and MoE apart), one step as a timeline (a lane per stream, kernels "
                    "coloured by module, layer borders), dispatch / combine wait against transfer per MoE layer and "
                    "rank with the straggler marked, the expert load, links to the CSVs. With a run directory's traces "
                    "it also writes each trace with its attribution as slices beside each stream (Perfetto, "
                    "chrome://tracing). Per-kernel timing comes from the kernel table (kernels_long.parquet, or an older "
                    "analysis's kernels_long.csv), else from the run's traces analysed again.")
    p.add_argument("run", metavar="RUN_OR_ANALYSIS_DIR", help="a run directory (analysis/ inside) or an analysis folder")
    p.add_argument("compare_with", nargs="*", metavar="COMPARE_WITH",
                   help="run directories or analysis folders to compare with: per D4 row, changed or within noise")
    p.add_argument("--out", default=None, help="folder for view.html and the annotated traces (default: "
                                              "RUN_OR_ANALYSIS_DIR/view; a new or empty folder, see --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="--out may hold this command's own earlier output, which is replaced (never other files)")
    p.add_argument("--lang", default="en", choices=["en", "zh"], help="the page's language at first (both are on it)")
    p.add_argument("--rank", default=None, help="the timeline's rank (default: the first)")
    p.add_argument("--step", type=int, default=None, help="the timeline's step (default: the median-length used step)")
    p.add_argument("--no-annotated-trace", action="store_true", help="do not write the annotated traces")
    p.set_defaults(func=run)


def _unique_names(runs: list) -> None:
    """Columns are told apart by name: a repeated one gets ' (2)', ' (3)'."""
    seen: dict[str, int] = {}
    for saved in runs:
        name = saved.column.name
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            saved.column.name = f"{name} ({seen[name]})"


def run(args: argparse.Namespace) -> int:
    from analysis.api import AnalysisError, open_saved, write_view
    from harness.manifest_check import saved_run_mismatch

    try:
        out_path = Path(args.out) if args.out else Path(args.run) / "view"
        out = prepare_output(out_path, "view", args.overwrite)
        for given in (args.run, *args.compare_with):
            if problem := saved_run_mismatch(given):
                raise AnalysisError(problem)
        runs = [open_saved(args.run, kernels=True)] + [open_saved(p, kernels=False) for p in args.compare_with]
        _unique_names(runs)
        names = out.write(lambda folder: write_view(folder, out.path, runs, lang=args.lang, rank=args.rank,
                                                    step=args.step, annotated=not args.no_annotated_trace))
    except (AnalysisError, OutputError) as exc:
        print(f"moe-harness view: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"moe-harness view: {exc}", file=sys.stderr)
        return 2
    for saved in runs:
        for note in saved.notes:
            print(f"moe-harness view: note: {note}", file=sys.stderr)
    for name in names:
        print(out.path / name)
    return 0
