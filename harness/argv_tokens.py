"""A command line's flags read as argparse reads them: `--flag V ...` or `--flag=V`, the last one winning.

Why its own module: the scenario's checks (harness/scenario.py), the launch plan and the argv checks
(harness/sglang/) read engine.extra_args the same way, and the scenario must not import the SGLang
folder that builds on it.
"""
from __future__ import annotations


def flag_uses(tokens: list[str] | tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """(flag, its values) per `--flag` token, in order: `--flag=V`, or the tokens up to the next flag."""
    uses: list[tuple[str, list[str]]] = []
    for token in tokens:
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            uses.append((name, [value] if eq else []))
        elif uses:
            uses[-1][1].append(token)
    return uses


def extra_arg_values(extra_args: tuple[str, ...] | list[str], flag: str) -> list[str | None]:
    """Every value engine.extra_args gives `flag` (`--flag V` or `--flag=V`), in order; None where it is
    given without one."""
    return [values[0] if values else None for name, values in flag_uses(extra_args) if name == flag]


def extra_arg_value(extra_args: tuple[str, ...] | list[str], flag: str) -> str | None:
    """The value SGLang takes for `flag` from engine.extra_args (argparse keeps the last), or None."""
    values = extra_arg_values(extra_args, flag)
    return values[-1] if values else None
