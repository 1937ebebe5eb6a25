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
from harness.commands.saved_analysis import open_saved
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
    from analysis.api import ANALYSIS_FILE, analyze
    from harness.recorded_run import is_run_dir

    if len(paths) == 1:
        for candidate in (Path(paths[0]), Path(paths[0]) / "analysis"):
            if (candidate / ANALYSIS_FILE).exists():
                _check_as_written(candidate / ANALYSIS_FILE)
                saved = open_saved(paths[0], kernels=False)  # spreads derived for an older analysis
                notes += saved.notes
                return _as_saved(name, saved.column, args)
        if is_run_dir(paths[0]):  # a run without its analysis.json: analysed again as it was
            from harness.reanalysis import reanalysed

            with reanalysed(paths[0]) as (_, written, _):
                return _as_saved(name, written.result.d4, args)
    return analyze(paths, signature=args.signature, model=args.model, options=options_from(args, name)).d4


def changes_of(columns) -> list:
    """Each column after the first against the first (analysis.tables.d4_diff)."""
    from analysis.api import diff_columns

    return [diff_columns(columns[0], other) for other in columns[1:]]


CHANGE_FIELDS = ("base", "other", "group", "module", "kernel", "base_us", "other_us", "diff_us", "base_sd_us",
                 "other_sd_us", "band_us", "effect_us", "verdict")


def write_changes_csv(path: Path, all_changes: list) -> None:
    """changes.csv: one line per (comparison, row), the end-to-end line first with group `end-to-end` (its
    values in ms, its effect in us)."""
    import csv

    from analysis.files import write_atomically

    def write(fh):
        out = csv.writer(fh)
        out.writerow(CHANGE_FIELDS)
        for changes in all_changes:
            step = changes.step
            for row, group in [(step, "end-to-end"), *((r, r.group) for r in changes.rows)]:
                out.writerow([changes.base, changes.other, group, row.module, row.kernel,
                              *("" if v is None else v for v in (row.base_us, row.other_us, row.diff_us, row.base_sd_us,
                                                                  row.other_sd_us, row.band_us, row.effect_us)),
                              row.verdict])

    write_atomically(path, write, binary=False)


def _as_saved(name: str, column, args):
    """A column analysed before (or as its run did) under this name; SOL options given here apply to it too."""
    column.name = name
    settings = sol_settings_from(args, model=args.model)
    if settings is not None:
        from analysis.api import with_sol

        column = with_sol(column, settings)
    return column


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
    from analysis.files import write_atomically
    from analysis.api import AnalysisError, render_changes_markdown, render_markdown, write_table_csv
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
    except (AnalysisError, RunDirError) as exc:
        print(f"moe-harness compare: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"moe-harness compare: note: {note}", file=sys.stderr)
    all_changes = changes_of(columns)
    table = render_markdown(columns, args.lang) + layer_count_note(columns) + "".join(f"- {n}\n" for n in notes)
    table += "".join("\n" + render_changes_markdown(changes, args.lang) for changes in all_changes)
    print(table)
    if out is not None:
        def fill(folder: Path) -> None:
            write_atomically(folder / "compare.md", table)
            write_table_csv(folder / "compare.csv", columns, args.lang)
            if all_changes:
                write_changes_csv(folder / "changes.csv", all_changes)

        if not out.write_or_say(fill)[0]:
            return 2
        print(f"wrote compare.md, compare.csv{' and changes.csv' if all_changes else ''} to {args.out}", file=sys.stderr)
    failing = [f"{c.name}: {', '.join(c.failed_checks)}" for c in columns if c.failed_checks]
    if args.strict and failing:
        print(f"moe-harness compare: --strict: self-check failed in {'; '.join(failing)}", file=sys.stderr)
        return 1
    return 0
