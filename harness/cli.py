"""`moe-harness` command line: one sub-command per module under harness/commands/.

Why the parser is built lazily: a command module imports what its command needs (the scenario
schema and pydantic for `run`, the report code for `report`), and building every command's parser
made `analyze` pay for all of them. Only the module of the command being run is imported to build
its full parser; the others appear as their one-line summaries (harness/commands/__init__.py).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from harness.commands import COMMANDS, module_of


def chosen_command(argv: list[str]) -> str | None:
    """The command a command line runs: its first word, when that names one (the top-level parser
    has no option that takes a value, so nothing before the command can be an option's value)."""
    first = next((word for word in argv if word != "--"), None)
    return first if first in COMMANDS else None


class PrintVersion(argparse.Action):
    """--version: the installed distribution's version, looked up only when asked (importlib.metadata
    would otherwise add its import to every command's start-up)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("moe-harness")
        except PackageNotFoundError:
            found = "unknown (not installed: pip install . from the checkout)"
        print(f"moe-harness {found}")
        parser.exit(0)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for this command line: the chosen command's in full (its module imported), every
    other command as its summary. argv None: every command in full (for tools that list them all)."""
    from harness.arg_types import OneLineParser

    parser = OneLineParser(
        prog="moe-harness",
        description="Benchmark harness for distributed MoE serving: traces in, per-layer D4 tables out.",
    )
    parser.add_argument("--version", action=PrintVersion, help="print the installed moe-harness version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = chosen_command(argv) if argv is not None else None
    for name, summary in COMMANDS.items():
        if argv is None or name == chosen:
            importlib.import_module(module_of(name)).register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 is printed escaped, never a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
