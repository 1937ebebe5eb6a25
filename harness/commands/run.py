"""`moe-harness run --scenario NAME`: the main job (same as `python harness/run.py`)."""
from __future__ import annotations

import argparse

from harness.commands import COMMANDS


def register(subparsers: argparse._SubParsersAction) -> None:
    from harness.run import add_arguments

    parser = subparsers.add_parser(
        "run",
        help=COMMANDS["run"],
        description="Run a scenario end to end through Ray (a local instance unless RAY_ADDRESS is set or "
        "this is a Ray job) and write a new run directory.",
    )
    add_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from harness.run import main_from_args

    return main_from_args(args)
