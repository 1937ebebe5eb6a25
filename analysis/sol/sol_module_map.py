"""Match D4 rows (group, module, kernel) to speed-of-light terms, from sol_module_map.yaml.

An entry names one term (`term:`) or, for a row that measures a whole module made of several terms
(a transformers module range: q/kv projections, norms and rotary in one row), a list (`terms:`).
A `kernel:` pattern is searched in the kernel's own name (pattern_text): its qualified name and
template arguments, without the return type or the parameter list, a mangled name as it reads
demangled, so `normal` in a random-number kernel's source file name or `norm` in a parameter type
does not make it a layer norm, while `flash` inside `cutlass::device_kernel<flash::...>` still names
the attention.

A row whose kernel is of a class listed under `never_classes:` (analysis/data/rules/kernel_classes.yaml:
copies and memsets, quantisation, the KV-cache write, an attention or MoE helper) takes no term: a
module's first row is often such a kernel (cuBLAS's memset before the W_UK GEMM, DeepEP's layout
kernel before its dispatch), and the term belongs to the kernel that does the module's work. An
entry's `class:` (a regex the kernel's class must match whole) names that kernel where words in
names cannot (`set_mla_kv_buffer` is not the MLA attention).
"""
from __future__ import annotations

import functools
import re
from collections.abc import Collection
from pathlib import Path

import msgspec
from analysis.ingest.kernel_classes import class_of_name
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
    kernel_class: re.Pattern | None = None  # `class:`, matched whole against the kernel's class

    def matches(self, group: str, module: str, kernel: str, kind: str) -> bool:
        """`kernel` as pattern_text gives it; `kind` its class (class_of_name)."""
        return all(
            pattern is None or pattern.search(text)
            for pattern, text in ((self.group, group), (self.module, module), (self.kernel, kernel))
        ) and (self.kernel_class is None or self.kernel_class.fullmatch(kind) is not None)


class ModuleMap(msgspec.Struct, frozen=True):
    """The map's entries, in order, and the kernel classes that never take a term."""

    entries: tuple[MapEntry, ...]
    never_classes: frozenset[str] = frozenset()


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


def load_module_map(path: str | None = None) -> ModuleMap:
    source = Path(path) if path else DEFAULT_MAP
    raw = read_yaml_file(source, object, ModuleMapError)
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), list):
        raise ModuleMapError(str(source), "needs a top-level `entries:` list")
    never = raw.get("never_classes", [])
    if not isinstance(never, list) or not all(isinstance(c, str) and c for c in never):
        raise ModuleMapError(str(source), "`never_classes` must be a list of kernel class names")
    entries = []
    for index, item in enumerate(raw["entries"]):
        terms = _entry_terms(item)
        if terms is None:
            raise ModuleMapError(str(source), f"entries[{index}] needs a `term` or a non-empty `terms` list (not both)")
        compiled = {}
        for key, field in (("group", "group"), ("module", "module"), ("kernel", "kernel"), ("class", "kernel_class")):
            try:
                compiled[field] = re.compile(item[key], re.IGNORECASE) if key in item else None
            except (re.error, TypeError) as exc:
                raise ModuleMapError(str(source), f"entries[{index}].{key}: bad regex: {exc}") from exc
        entries.append(MapEntry(terms=terms, **compiled))
    return ModuleMap(tuple(entries), frozenset(never))


def _entry_terms(item: object) -> tuple[str, ...] | None:
    if not isinstance(item, dict) or (("term" in item) == ("terms" in item)):
        return None
    if "term" in item:
        return (str(item["term"]),) if item["term"] else None
    listed = item["terms"]
    if not isinstance(listed, list) or not listed or not all(isinstance(t, str) and t for t in listed):
        return None
    return tuple(listed)


def assign_terms(mapping: ModuleMap, rows: list[tuple[str, str, str]],
                 available: Collection[str] | None = None) -> list[tuple[str, ...]]:
    """Per (group, module, kernel) row, in table order, the terms of the first entry it matches whose
    terms are still free; () for none. A term goes to the first matching row only, so a module split
    over several kernel rows is counted once; a row whose first entry's term is taken gets the next
    matching entry's (two `torch.bmm` rows: W_UK, then W_UV).

    Of an entry's terms, those not in `available` (the deployment's model and MLA form has no such
    term) are dropped; an entry with none left, or with any left term already taken by an earlier
    row, is passed over, so a composite row gets its whole module or nothing. Sum rows and rows
    whose kernel is of one of the map's never_classes get none.
    """
    # each entry's terms this deployment has, once (entries left without any are never tried)
    usable = [(entry, terms) for entry in mapping.entries
              if (terms := tuple(t for t in entry.terms if available is None or t in available))]
    out: list[tuple[str, ...]] = []
    taken: set[str] = set()
    for group, module, kernel in rows:
        out.append(())
        kind = class_of_name(kernel) if kernel else ""
        if module.strip().lower() in ("sum", "total") or kind in mapping.never_classes:
            continue
        text = pattern_text(kernel)
        for entry, terms in usable:
            if not any(t in taken for t in terms) and entry.matches(group, module, text, kind):
                out[-1] = terms
                taken.update(terms)
                break
    return out
