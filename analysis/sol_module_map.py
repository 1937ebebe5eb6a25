"""Match D4 rows (group, module, kernel) to speed-of-light terms, from sol_module_map.yaml."""
from __future__ import annotations

import re
from pathlib import Path

import msgspec
import yaml

from analysis.errors import AnalysisError

DEFAULT_MAP = Path(__file__).parent / "sol_module_map.yaml"


class ModuleMapError(AnalysisError):
    def __init__(self, source: str, problem: str):
        super().__init__(f"SOL module map {source}: {problem}")


class MapEntry(msgspec.Struct, frozen=True):
    term: str
    group: re.Pattern | None
    module: re.Pattern | None
    kernel: re.Pattern | None

    def matches(self, group: str, module: str, kernel: str) -> bool:
        return all(
            pattern is None or pattern.search(text)
            for pattern, text in ((self.group, group), (self.module, module), (self.kernel, kernel))
        )


def load_module_map(path: str | None = None) -> list[MapEntry]:
    source = Path(path) if path else DEFAULT_MAP
    try:
        raw = yaml.safe_load(source.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ModuleMapError(str(source), f"cannot read: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), list):
        raise ModuleMapError(str(source), "needs a top-level `entries:` list")
    entries = []
    for index, item in enumerate(raw["entries"]):
        if not isinstance(item, dict) or not item.get("term"):
            raise ModuleMapError(str(source), f"entries[{index}] needs a `term`")
        compiled = {}
        for key in ("group", "module", "kernel"):
            try:
                compiled[key] = re.compile(item[key], re.IGNORECASE) if key in item else None
            except re.error as exc:
                raise ModuleMapError(str(source), f"entries[{index}].{key}: bad regex: {exc}") from exc
        entries.append(MapEntry(term=str(item["term"]), **compiled))
    return entries


def match_term(entries: list[MapEntry], group: str, module: str, kernel: str,
               taken: set[str] | frozenset[str] = frozenset()) -> str | None:
    """The first matching entry's term that is not already taken (None for sum rows)."""
    if module.strip().lower() in ("sum", "total"):
        return None
    for entry in entries:
        if entry.term not in taken and entry.matches(group, module, kernel):
            return entry.term
    return None
