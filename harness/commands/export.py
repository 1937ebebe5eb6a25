"""`moe-harness export RUN --format csv|parquet`: the run's tables with documented columns.

The tables come from RUN/analysis (the kernel table from kernels_long.parquet, or from an older
analysis's kernels_long.csv); when a table asked for is not there (the bundled runs leave the kernel
table out), every table comes from the run's traces analysed again with the options it
recorded (harness/reanalysis.py), so an export never mixes two analyses."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands import COMMANDS
from harness.exports.tables import FORMATS, export_run, load_schema, missing_sources
from harness.metrics.errors import RunDataError


def register(subparsers) -> None:
    _, specs = load_schema()
    parser = subparsers.add_parser(
        "export", help=COMMANDS["export"],
        description="Write RUN's analysis tables (kernels_long, steps, d4) with a schema_version column; "
                    "columns are documented in docs/exports.md. Read from RUN/analysis; when a table asked for is "
                    "missing there, all of them come from the run's traces analysed again with the options it "
                    "recorded (a note on stderr says so).")
    parser.add_argument("run", metavar="RUN", help="run directory (runs/<scenario>-<timestamp>)")
    parser.add_argument("--format", choices=FORMATS, default="csv", help="output format (default csv)")
    parser.add_argument("--out", help="output directory (default RUN/exports)")
    parser.add_argument("--table", action="append", choices=list(specs),
                        help="table to export; repeat for several (default all)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace this command's own earlier export files (never a file it did not write, "
                             "nor one edited since)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from analysis.api import AnalysisError
    from harness.output_dir import OutputError
    from harness.recorded_run import RunDirError, is_run_dir

    tables = tuple(args.table) if args.table else None
    try:
        missing = missing_sources(args.run, tables)
        if missing and is_run_dir(args.run):
            paths = _export_reanalysed(args, tables, missing[0])
        else:
            paths = export_run(args.run, args.format, args.out, tables, args.overwrite)
    except (RunDataError, OutputError, OSError, ValueError, AnalysisError, RunDirError) as exc:
        print(f"moe-harness export: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


def _export_reanalysed(args: argparse.Namespace, tables: tuple[str, ...] | None, missing: Path) -> list:
    """Every table from the run's traces analysed again (into a temporary folder) as its run did."""
    from harness.reanalysis import reanalysed

    with reanalysed(args.run) as (run, _, adir):
        print(f"note: {missing} not found: exporting from the run's {len(run.traces)} trace(s) analysed again "
              f"with the options it recorded", file=sys.stderr)
        return export_run(adir.parent, args.format, args.out or Path(args.run) / "exports", tables, args.overwrite,
                          fresh=True)
