"""Kernel names as a displayed table shows them: short, and never two kernels under one text.

Why: the kernel column carries whole names (module_attribution.name_label), some hundreds of
characters long; a Markdown table or the console shows a short form. The short form alone would
show `at::native::vectorized_elementwise_kernel…` for every variant of it, so names of one table
that shorten alike are shown with the part where they part (the same place for all of them, so the
column reads as a comparison); names still alike after a few such steps are shown whole. Whole names
differ, so two kernels never share a text. Data files (CSV, Parquet, JSON) keep the whole names.
"""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable

from analysis.attribution.module_attribution import name_label

SHORT_CHARS = 48  # a name up to this long is shown as it is
PART_CHARS = 40  # how much of the part where alike names part is shown
PART_STEPS = 3  # a name still alike after this many parts shown is shown whole
CUT = "…"
_TOKEN_STARTS_AFTER = " ,<"  # a shown part starts at a whole template argument or word
_ANONYMOUS = "(anonymous namespace)"  # part of a qualified name, not a parameter list


def _base_name(name: str) -> str:
    """The kernel's own name: return type, template arguments and parameters left out."""
    if name.startswith("_Z"):  # mangled: its readable form
        from analysis.ingest.kernel_names import readable_name

        return readable_name(name)
    base = name_label(name)
    masked = base.replace(_ANONYMOUS, "_" * len(_ANONYMOUS))
    cuts = [i for i in (masked.find("<"), masked.find("(")) if i > 0]
    return base[:min(cuts)] if cuts else base


def _short(name: str) -> str:
    """The base name, marked where anything was left out (a mangled name's readable form stands for
    all of it)."""
    base = _base_name(name)
    if len(base) > SHORT_CHARS:
        return base[:SHORT_CHARS - 1] + CUT
    return base if base == name_label(name) or name.startswith("_Z") else base + CUT


def _parting(names: list[str]) -> int:
    """Where alike names part: their common beginning, backed up to a token's start."""
    text = name_label(names[0])
    at = len(os.path.commonprefix([name_label(n) for n in names]))
    while at > 0 and text[at - 1] not in _TOKEN_STARTS_AFTER:
        at -= 1
    return at


def _with_part(name: str, at: int) -> str:
    text = name_label(name)
    part = text[at:at + PART_CHARS]
    return _short(name).removesuffix(CUT) + CUT + part + (CUT if at + PART_CHARS < len(text) else "")


def shown_names(names: Iterable[str]) -> dict[str, str]:
    """Each distinct name -> the text a table shows for it; no two names get one text."""
    shown = {name: _short(name) if len(name) > SHORT_CHARS else name for name in names}
    steps = dict.fromkeys(shown, 0)
    while True:
        by_text: dict[str, list[str]] = defaultdict(list)
        for name, text in shown.items():
            by_text[text].append(name)
        alike = [same for same in by_text.values() if len(same) > 1]
        if not alike:
            return shown
        for same in alike:  # never all shown whole: whole names differ
            at = _parting(same)
            for name in same:
                if shown[name] != name:
                    steps[name] += 1
                    shown[name] = _with_part(name, at) if steps[name] <= PART_STEPS else name


def with_shown_names(rows: list[list[str]], column: int) -> list[list[str]]:
    """The table's rows with `column` shown through shown_names (the rows are not changed)."""
    shown = shown_names(row[column] for row in rows)
    return [[*row[:column], shown[row[column]], *row[column + 1:]] for row in rows]
