"""Each supported release's launch flags, shipped with the harness as data (launch_flags.yaml).

Why a shipped copy: the flags are read out of each release's wheel (harness/sglang/cli_source.py via
wheel_source.py), which needs the wheel cache or PyPI; `validate` and the plan must judge a command
line offline, on a laptop or in the image, with neither. The file holds the oldest release's flags in
full and, for each later one, what it added, changed or removed; tests/test_validate_round_three.py
holds it against tests/data/sglang_releases/ (what extract_release.py read out of each wheel).

    python -m harness.sglang.launch_flags --write    # rewrite launch_flags.yaml from the wheels
    python -m harness.sglang.launch_flags --check    # compare only; exit 1 when a release differs

A release the file does not list (one newer than versions.yaml knows) has no table: its flags are not
judged here, only by its own parser on the nodes.
"""
from __future__ import annotations

import argparse
import sys
from functools import lru_cache
from pathlib import Path

import yaml

from harness.sglang.flags import FlagSpec, FlagTable

LAUNCH_FLAGS_PATH = Path(__file__).with_name("launch_flags.yaml")
HEADER = """\
# Every supported SGLang release's launch flags, as harness/sglang/cli_source.py reads them out of the
# release's wheel. Written by `python -m harness.sglang.launch_flags --write`; do not edit by hand.
# `releases` lists the oldest release in full, then per release what changed from the one before:
# `set` (a flag added or changed, whole), `removed` (flags it no longer has).
# A flag: its argparse nargs (0: a switch; 1: one value; "?", "+" or "*"), or a mapping with `nargs`
# and any of `aliases` (other spellings of the same flag), `choices`, `deprecated` (true, or what
# SGLang says to use instead).
"""


class LaunchFlagsError(ValueError):
    """launch_flags.yaml is malformed, or differs from what the wheels say."""


def _nargs(spec: FlagSpec):
    if not spec.takes_value:
        return 0
    if spec.multiple:
        return "*" if spec.value_optional else "+"
    return "?" if spec.value_optional else 1


def _entry(spec: FlagSpec, aliases: list[str]):
    """One flag as data: its nargs alone, or a mapping when it has more to say."""
    extra = {}
    if aliases:
        extra["aliases"] = aliases
    if spec.choices is not None:
        extra["choices"] = list(spec.choices)
    if spec.deprecated:
        extra["deprecated"] = spec.replacement or True
    return {"nargs": _nargs(spec), **extra} if extra else _nargs(spec)


def _spec(name: str, entry, where: str) -> FlagSpec:
    data = entry if isinstance(entry, dict) else {"nargs": entry}
    nargs = data.get("nargs")
    if nargs not in (0, 1, "?", "+", "*"):
        raise LaunchFlagsError(f"{where}: {name}: nargs {nargs!r} is not 0, 1, '?', '+' or '*'")
    deprecated = data.get("deprecated", False)
    choices = data.get("choices")
    return FlagSpec(names=(name, *data.get("aliases", ())), takes_value=nargs != 0, multiple=nargs in ("+", "*"),
                    choices=tuple(str(c) for c in choices) if choices is not None else None,
                    value_optional=nargs in ("?", "*"), deprecated=bool(deprecated),
                    replacement=deprecated if isinstance(deprecated, str) else None)


def entries_of(table: FlagTable) -> dict[str, object]:
    """{primary name: entry} of a table: each flag once, its other spellings as aliases."""
    out: dict[str, object] = {}
    seen: set[int] = set()
    for name, spec in table.flags.items():
        if id(spec) in seen:
            continue
        seen.add(id(spec))
        spellings = [n for n in spec.names if table.flags.get(n) is spec]
        out[spellings[0]] = _entry(spec, spellings[1:])
    return dict(sorted(out.items()))


def _table(version: str, entries: dict[str, object], where: str) -> FlagTable:
    table = FlagTable(version)
    for name, entry in entries.items():
        spec = _spec(name, entry, where)
        for spelling in spec.names:
            if spelling in table.flags:
                raise LaunchFlagsError(f"{where}: SGLang {version}: {spelling} is declared twice")
            table.flags[spelling] = spec
    return table


@lru_cache(maxsize=1)
def _release_entries(path: str = str(LAUNCH_FLAGS_PATH)) -> dict[str, dict[str, object]]:
    """{release: {primary name: entry}}, each release's deltas applied over the one before."""
    data = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    releases = (data or {}).get("releases")
    if not isinstance(releases, dict) or not releases:
        raise LaunchFlagsError(f"{path}: no `releases` mapping")
    out, current = {}, {}
    for version, change in releases.items():
        change, current = change or {}, dict(current)
        for name in change.get("removed") or ():
            if current.pop(name, None) is None:
                raise LaunchFlagsError(f"{path}: SGLang {version} removes {name}, which it did not have")
        current = dict(sorted({**current, **(change.get("set") or {})}.items()))
        out[str(version)] = current
    return out


def release_flag_table(version: str) -> FlagTable | None:
    """The release's launch flags, or None when launch_flags.yaml has no table for it (not guessed)."""
    entries = _release_entries().get(version)
    return None if entries is None else _table(version, entries, str(LAUNCH_FLAGS_PATH))


def canonical_flag(name: str, table: FlagTable | None) -> str:
    """The flag's primary spelling in the release (`--tensor-parallel-size` is `--tp-size`); itself
    without a table or for a name the release does not know."""
    spec = table.flags.get(name) if table is not None else None
    return spec.names[0] if spec is not None else name


def render_file(tables: dict[str, dict[str, object]]) -> str:
    """launch_flags.yaml's text for {release: entries}, oldest release first."""
    releases, before = {}, None
    for version, entries in tables.items():
        if before is None:
            releases[version] = {"set": entries}
        else:
            change = {}
            changed = {k: v for k, v in entries.items() if before.get(k) != v}
            removed = sorted(k for k in before if k not in entries)
            if changed:
                change["set"] = changed
            if removed:
                change["removed"] = removed
            releases[version] = change or None
        before = entries
    body = yaml.safe_dump({"releases": releases}, sort_keys=False, default_flow_style=None, width=120)
    return HEADER + body


def _from_wheels() -> dict[str, dict[str, object]]:
    from harness.sglang.version import known_releases
    from harness.sglang.wheel_source import flag_table

    return {v: entries_of(flag_table(v)) for v in known_releases()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.sglang.launch_flags", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare launch_flags.yaml with the wheels; write nothing")
    parser.add_argument("--write", action="store_true", help="rewrite launch_flags.yaml from the wheels")
    args = parser.parse_args(argv)
    if args.check == args.write:
        parser.error("give --check or --write")
    text = render_file(_from_wheels())
    if args.write:
        LAUNCH_FLAGS_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {LAUNCH_FLAGS_PATH}")
        return 0
    same = LAUNCH_FLAGS_PATH.exists() and LAUNCH_FLAGS_PATH.read_text(encoding="utf-8") == text
    print(f"{LAUNCH_FLAGS_PATH}: {'as the wheels say' if same else 'differs from the wheels: run with --write'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
