"""`moe-harness export RUN --format csv|parquet`: the run's tables with documented columns."""
from __future__ import annotations

import argparse
import sys

from harness.exports.tables import FORMATS, export_run, load_schema
from harness.metrics.errors import RunDataError


def register(subparsers) -> None:
    _, specs = load_schema()
    parser = subparsers.add_parser(
        "export", help="export a run's kernel, step and D4 tables as CSV or Parquet",
        description="Write RUN's analysis tables (kernels_long, steps, d4) with a schema_version column; "
                    "columns are documented in docs/exports.md. Parquet needs pyarrow.")
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
    from harness.output_dir import OutputError

    try:
        paths = export_run(args.run, args.format, args.out, tuple(args.table) if args.table else None, args.overwrite)
    except (RunDataError, OutputError, OSError, ValueError) as exc:
        print(f"moe-harness export: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0
