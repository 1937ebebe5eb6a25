"""`moe-harness compare`: several runs side by side as columns of one D4 table."""
from __future__ import annotations

import sys
from pathlib import Path

from harness.commands.analyze import add_analysis_options, add_overwrite_argument, options_from
from harness.output_dir import OutputError, prepare_output
from harness.commands.sol_options import sol_settings_from


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="put several runs side by side as columns of one D4 table",
        description="Each COLUMN is NAME=PATH[,PATH...]: an analysis directory written by `analyze --out` "
                    "(or a run directory holding analysis/), or trace files/directories analysed here with the options below. "
                    "SOL options (--hardware, --batch-per-rank, --kv-len, ...) apply to every column, saved ones included.")
    p.add_argument("columns", nargs="+", metavar="NAME=PATH[,PATH...]")
    p.add_argument("--out", default=None, help="directory for compare.md and compare.csv (a new or empty folder; see --overwrite)")
    add_overwrite_argument(p)
    add_analysis_options(p)
    p.set_defaults(func=run)


def _column(name: str, paths: list[str], args):
    from analysis.api import ANALYSIS_FILE, analyze, load_column

    if len(paths) == 1:
        for candidate in (Path(paths[0]), Path(paths[0]) / "analysis"):
            if (candidate / ANALYSIS_FILE).exists():
                _check_as_written(candidate / ANALYSIS_FILE)
                column = load_column(candidate)
                column.name = name
                settings = sol_settings_from(args, model=args.model)
                if settings is not None:  # SOL options on the command line apply to saved columns too
                    from analysis.api import with_sol

                    column = with_sol(column, settings)
                return column
    return analyze(paths, signature=args.signature, model=args.model, options=options_from(args, name)).d4


def _check_as_written(path: Path) -> None:
    """The saved column is the one written (its run's manifest or analyze's marker, where there is one)."""
    from analysis.api import AnalysisError
    from harness.recorded_files import RecordError, check_as_written

    try:
        check_as_written(path)
    except RecordError as exc:
        raise AnalysisError(str(exc)) from None


def layer_count_note(columns) -> str:
    """A note (also on stderr) when the columns' models have different layer counts: per-layer rows
    compare, the all-layers and end-to-end lines do not."""
    counts = {c.name: round(c.num_layers) for c in columns}
    if len(set(counts.values())) < 2:
        return ""
    note = ("- LAYER COUNTS DIFFER: " + ", ".join(f"{name} {n:g}" for name, n in counts.items())
            + " layers per step; the per-layer rows compare, the all-layers and end-to-end lines do not\n")
    print(f"moe-harness compare: warning: {note[2:].strip()}", file=sys.stderr)
    return note


def run(args) -> int:
    from analysis.api import AnalysisError, _atomic_write, render_markdown, write_table_csv

    columns = []
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
            columns.append(_column(name, paths.split(","), args))
    except AnalysisError as exc:
        print(f"moe-harness compare: {exc}", file=sys.stderr)
        return 2
    table = render_markdown(columns, args.lang) + layer_count_note(columns)
    print(table)
    if out is not None:
        def fill(folder: Path) -> None:
            _atomic_write(folder / "compare.md", lambda fh: fh.write(table))
            write_table_csv(folder / "compare.csv", columns, args.lang)

        if not out.write_or_say(fill)[0]:
            return 2
        print(f"wrote compare.md and compare.csv to {args.out}", file=sys.stderr)
    failing = [f"{c.name}: {', '.join(c.failed_checks)}" for c in columns if c.failed_checks]
    if args.strict and failing:
        print(f"moe-harness compare: --strict: self-check failed in {'; '.join(failing)}", file=sys.stderr)
        return 1
    return 0
