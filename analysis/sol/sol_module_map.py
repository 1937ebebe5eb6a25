"""Match D4 rows (group, module, kernel) to speed-of-light terms, from sol_module_map.yaml.

An entry names one term (`term:`) or, for a row that measures a whole module made of several terms
(a transformers module range: q/kv projections, norms and rotary in one row), a list (`terms:`).
A `kernel:` pattern is searched in the kernel's own name (pattern_text): its qualified name and
template arguments, without the return type or the parameter list, a mangled name as it reads
demangled, so `normal` in a random-number kernel's source file name or `norm` in a parameter type
does not make it a layer norm, while `flash` inside `cutlass::device_kernel<flash::...>` still names
the attention.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Collection
from pathlib import Path

import msgspec
from analysis.io.data_files import read_yaml_file
from analysis.errors import AnalysisError

DEFAULT_MAP = Path(__file__).parent / "sol_module_map.yaml"
_SIGNATURE = re.compile(r"[\w>]\(")  # a C++ function's parameter list follows its name directly


class ModuleMapError(AnalysisError):
    def __init__(self, source: str, problem: str):
        super().__init__(f"SOL module map {source}: {problem}")


class MapEntry(msgspec.Struct, frozen=True):
    terms: tuple[str, ...]
    group: re.Pattern | None
    module: re.Pattern | None
    kernel: re.Pattern | None

    def matches(self, group: str, module: str, kernel: str) -> bool:
        return all(
            pattern is None or pattern.search(text)
            for pattern, text in ((self.group, group), (self.module, module), (self.kernel, kernel))
        )

    @property
    def term(self) -> str:
        return "+".join(self.terms)


@functools.lru_cache(maxsize=4096)
def pattern_text(kernel: str) -> str:
    """What a `kernel:` pattern is searched in: a demangled signature's qualified name with its
    template arguments, a mangled name's readable form; anything else (a signature's label, "" of a
    module range's row) as it is."""
    from analysis.ingest.kernel_names import readable_name, split_signature

    if kernel.startswith("_Z"):
        return readable_name(kernel)
    if not _SIGNATURE.search(kernel):  # a label (`deep_gemm masked`) or a copy (`Memcpy DtoD (Device -> Device)`)
        return kernel
    qualified, arguments = split_signature(kernel)
    return f"{qualified}<{arguments}>" if arguments else qualified


def load_module_map(path: str | None = None) -> list[MapEntry]:
    source = Path(path) if path else DEFAULT_MAP
    raw = read_yaml_file(source, object, ModuleMapError)
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), list):
        raise ModuleMapError(str(source), "needs a top-level `entries:` list")
    entries = []
    for index, item in enumerate(raw["entries"]):
        terms = _entry_terms(item)
        if terms is None:
            raise ModuleMapError(str(source), f"entries[{index}] needs a `term` or a non-empty `terms` list (not both)")
        compiled = {}
        for key in ("group", "module", "kernel"):
            try:
                compiled[key] = re.compile(item[key], re.IGNORECASE) if key in item else None
            except re.error as exc:
                raise ModuleMapError(str(source), f"entries[{index}].{key}: bad regex: {exc}") from exc
        entries.append(MapEntry(terms=terms, **compiled))
    return entries


def _entry_terms(item: object) -> tuple[str, ...] | None:
    if not isinstance(item, dict) or (("term" in item) == ("terms" in item)):
        return None
    if "term" in item:
        return (str(item["term"]),) if item["term"] else None
    listed = item["terms"]
    if not isinstance(listed, list) or not listed or not all(isinstance(t, str) and t for t in listed):
        return None
    return tuple(listed)


def match_terms(entries: list[MapEntry], group: str, module: str, kernel: str,
                taken: Collection[str] = frozenset(), available: Collection[str] | None = None) -> tuple[str, ...]:
    """The terms of the first matching entry that can be given to this row; () for none (and sum rows).

    Of an entry's terms, those not in `available` (the deployment's model and MLA form has no such
    term) are dropped; an entry with none left, or with any left term already `taken` by an earlier
    row, is passed over, so a composite row gets its whole module or nothing.
    """
    if module.strip().lower() in ("sum", "total"):
        return ()
    for entry in entries:
        terms = tuple(t for t in entry.terms if available is None or t in available)
        if terms and not any(t in taken for t in terms) and entry.matches(group, module, pattern_text(kernel)):
            return terms
    return ()

