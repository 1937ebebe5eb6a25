"""`moe-harness compare`: several runs side by side as columns of one D4 table, and what changed.

Each column after the first is judged against the first, row by row, by the noise rule of
analysis/tables/changes.yaml (docs/analysis.md, "What changed"): the difference, both runs'
per-step spread, the effect on the step and a verdict, largest effect first."""
from __future__ import annotations

import sys
from pathlib import Path

from harness.commands import COMMANDS
from harness.commands.analyze import add_analysis_options, add_overwrite_argument, options_from
from harness.output_dir import OutputError, prepare_output
from harness.commands.sol_options import sol_settings_from


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help=COMMANDS["compare"],
        description="Each COLUMN is NAME=PATH[,PATH...]: an analysis directory written by `analyze --out`, a run "
                    "directory (its analysis/analysis.json, else its traces analysed again with the options the run "
                    "recorded), or trace files/directories analysed here with the options below. "
                    "SOL options (--hardware, --batch-per-rank, --kv-len, ...) apply to every column, saved ones included. "
                    "Every column after the first is compared with the first: per D4 row (MTP and wait / transfer rows "
                    "too) the difference, both runs' per-step spread, the effect on the step and a verdict, changed or "
                    "within noise (docs/analysis.md, 'What changed'), largest effect first.")
    p.add_argument("columns", nargs="+", metavar="NAME=PATH[,PATH...]")
    p.add_argument("--out", default=None, help="directory for compare.md, compare.csv and changes.csv (a new or empty "
                                              "folder; see --overwrite)")
    add_overwrite_argument(p)
    add_analysis_options(p)
    p.set_defaults(func=run)


def _column(name: str, paths: list[str], args, notes: list[str]):
    from analysis.api import analyze, open_saved
    from harness.recorded_run import is_run_dir

    if len(paths) == 1:
        # spreads derived for an older analysis; None where the path holds no analysis.json
        saved = open_saved(paths[0], kernels=False, check=_check_as_written, required=False)
        if saved is not None:
            notes += saved.notes
            return _as_saved(name, saved.column, args)
        if is_run_dir(paths[0]):  # a run without its analysis.json: analysed again as it was
            from harness.reanalysis import reanalysed

            with reanalysed(paths[0]) as (_, written, _):
                return _as_saved(name, written.result.d4, args)
    return analyze(paths, signature=args.signature, model=args.model, options=options_from(args, name)).d4


def _as_saved(name: str, column, args):
    """A column analysed before (or as its run did) under this name (compare_columns gives it the SOL
    columns of the options given here)."""
    column.name = name
    return column


def _check_as_written(path: Path) -> None:
    """The saved column is the one written (its run's manifest or analyze's marker, where there is one)."""
    from analysis.api import AnalysisError
    from harness.recorded_files import RecordError, check_as_written

    try:
        check_as_written(path)
    except RecordError as exc:
        raise AnalysisError(str(exc)) from None


def run(args) -> int:
    from analysis.api import AnalysisError, compare_columns
    from harness.recorded_run import RunDirError

    columns, notes = [], []
    try:
        out = prepare_output(args.out, "compare", args.overwrite) if args.out else None
    except OutputError as exc:
        print(f"moe-harness compare: {exc}", file=sys.stderr)
        return 2
    try:
        for spec in args.columns:
            name, sep, paths = spec.partition("=")
            if not sep or not name or not paths:
                print(f"moe-harness compare: a column is NAME=PATH[,PATH...], got {spec!r}", file=sys.stderr)
                return 2
            columns.append(_column(name, paths.split(","), args, notes))
        comparison = compare_columns(columns, args.lang, notes, sol=sol_settings_from(args, model=args.model))
    except (AnalysisError, RunDirError) as exc:
        print(f"moe-harness compare: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"moe-harness compare: note: {note}", file=sys.stderr)
    for warning in comparison.warnings:
        print(f"moe-harness compare: warning: {warning}", file=sys.stderr)
    print(comparison.markdown)
    if out is not None:
        if not out.write_or_say(comparison.write)[0]:
            return 2
        print(f"wrote compare.md, compare.csv{' and changes.csv' if comparison.changes else ''} to {args.out}",
              file=sys.stderr)
    failing = [f"{c.name}: {', '.join(c.failed_checks)}" for c in columns if c.failed_checks]
    if args.strict and failing:
        print(f"moe-harness compare: --strict: self-check failed in {'; '.join(failing)}", file=sys.stderr)
        return 1
    return 0
