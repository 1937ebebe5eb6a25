"""A release's launch flags as data, and the offline check of a command line against them.

The table comes from the release's own source (harness/sglang/cli_source.py reads it out of the
wheel); the check runs anywhere, with no GPU and no SGLang installed. On the nodes the harness
also asks SGLang's own parser (harness/sglang/node_check.py), which is the final judge.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field


class FlagError(ValueError):
    """A command line uses a flag or value the target SGLang does not accept."""


@dataclass(frozen=True)
class FlagSpec:
    names: tuple[str, ...]
    takes_value: bool
    multiple: bool = False          # nargs "+" or "*"
    choices: tuple[str, ...] | None = None   # None: open, or not resolvable from the source
    value_optional: bool = False    # nargs "?" or "*"
    deprecated: bool = False        # a Deprecated*Action, or help that starts with "Deprecated"
    replacement: str | None = None  # what SGLang says to use instead (new_flag=, or the help text)


@dataclass
class FlagTable:
    version: str
    flags: dict[str, FlagSpec] = field(default_factory=dict)

    def __contains__(self, name: str) -> bool:
        return name in self.flags

    def problems(self, argv: list[str], keys: dict[str, str] | None = None) -> list[str]:
        """One line per bad token of argv (the arguments after launch_server), naming its scenario key."""
        keys = keys or {}
        errors: list[str] = []

        def key_of(name: str) -> str:
            return f" (from {keys[name]})" if name in keys else ""

        i = 0
        while i < len(argv):
            token = argv[i]
            i += 1
            if not token.startswith("--"):
                errors.append(f"unexpected positional argument {token!r}")
                continue
            name, eq, inline_value = token.partition("=")
            spec = self.flags.get(name)
            if spec is None:
                close = difflib.get_close_matches(name, self.flags, n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                errors.append(f"unknown flag {name}{key_of(name)}{hint}")
                while not eq and i < len(argv) and not argv[i].startswith("--"):
                    i += 1  # its values: no use reporting them as stray positionals
                continue
            if spec.deprecated:
                instead = f": {spec.replacement}" if spec.replacement else ""
                errors.append(f"deprecated flag {name}{key_of(name)}{instead}")
            if not spec.takes_value:
                if eq:
                    errors.append(f"{name}{key_of(name)} takes no value, got {inline_value!r}")
                continue
            values = [inline_value] if eq else []
            while not eq and i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
                if not spec.multiple:
                    break
            if not values and not spec.value_optional:
                errors.append(f"{name}{key_of(name)} needs a value")
                continue
            if spec.choices is not None:
                errors += [f"{name}{key_of(name)} {v!r} is not one of {list(spec.choices)}"
                           for v in values if v not in spec.choices]
        return errors

    def validate(self, argv: list[str], where: str = "command", keys: dict[str, str] | None = None) -> None:
        """Raise FlagError naming every unknown, deprecated or invalid token of argv."""
        errors = self.problems(argv, keys)
        if errors:
            raise FlagError(f"{where}: not accepted by SGLang {self.version}: " + "; ".join(errors))
