"""`moe-harness metrics RUN`: a run's Prometheus metrics from its files; optionally push them."""
from __future__ import annotations

import argparse
import sys

from harness.commands import COMMANDS
from harness.metrics.errors import RunDataError


def register(subparsers) -> None:
    from harness.metrics.cli_options import add_push_arguments

    parser = subparsers.add_parser(
        "metrics", help=COMMANDS["metrics"],
        description="Build the run's metrics from its directory (manifest, analysis CSVs, load records), "
                    "print them in the Prometheus text format, and push them to a Pushgateway if one is given. "
                    "A Pushgateway that is unreachable, refuses, or has not answered within 30 s in all is a "
                    "warning (exit status 0); credentials in its URL are sent, never printed. A run without a manifest has status "
                    "running only while the process named in its .running file lives, else incomplete; a folder "
                    "that is not a run is an error. Only what the run wrote is read: its traces are never "
                    "analysed again.")
    parser.add_argument("run", metavar="RUN", help="run directory (runs/<scenario>-<timestamp>)")
    parser.add_argument("--quiet", action="store_true", help="do not print the metrics")
    add_push_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prometheus_client import generate_latest

    from harness.metrics.push import push_registry
    from harness.metrics.results import build_registry
    from harness.metrics.run_data import read_run

    try:
        data = read_run(args.run)
    except RunDataError as exc:
        print(f"moe-harness metrics: {exc}", file=sys.stderr)
        return 1
    registry = build_registry(data)
    if not args.quiet:
        sys.stdout.write(generate_latest(registry).decode())
    for problem in data.problems:
        print(f"note: {problem}", file=sys.stderr)
    if args.pushgateway:
        result = push_registry(registry, args.pushgateway, scenario=data.scenario, run_id=data.run_id,
                               job=args.push_job, delete_old_groups=args.delete_old_groups)
        if result.ok:  # a failed push is already reported as a logged warning
            print(result.message, file=sys.stderr)
        for old in result.deleted_groups:
            print(f"deleted Pushgateway group run_id={old}", file=sys.stderr)
    return 0
