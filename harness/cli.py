"""`moe-harness` command line: one sub-command per module under harness/commands/."""
from __future__ import annotations

import argparse
import importlib
import sys

# Each entry is a module exposing `register(subparsers)`; the parser it adds sets `func`.
COMMAND_MODULES = [
    "harness.commands.analyze",
    "harness.commands.compare",
    "harness.commands.validate",
    "harness.commands.run",
    "harness.commands.plan",
    "harness.commands.export",
    "harness.commands.metrics",
    "harness.commands.report",
    "harness.commands.view",
    "harness.commands.ncu",
    "harness.commands.learn_signature",
    "harness.commands.calibrate",
]


def build_parser() -> argparse.ArgumentParser:
    from harness.arg_types import OneLineParser

    parser = OneLineParser(
        prog="moe-harness",
        description="Benchmark harness for distributed MoE serving: traces in, per-layer D4 tables out.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 is printed escaped, never a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
