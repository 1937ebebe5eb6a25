"""Order-preserving alignment of a kernel sequence against a signature template.

Why dynamic programming: one kernel family appears in several slots of a layer (DeepGEMM for
q_a, q_b, o_proj, experts...), so a kernel's slot is decided by its position among its
neighbours, not by its name alone. The alignment maximises matched kernels while keeping the
template's order; optional slots may be skipped, repeat slots may take a run of kernels.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from analysis.signature import Entry

MATCH = 2.0
SKIP_REQUIRED = -1.0
SKIP_OPTIONAL = 0.0
UNMATCHED = -0.25

_NONE, _KERNEL, _ENTRY, _MATCH, _EXTEND = range(5)


@lru_cache(maxsize=200_000)
def _matches(entry: Entry, name: str) -> bool:
    return entry.matches(name)


def align(names: Sequence[str], entries: Sequence[Entry], weights: Sequence[float] | None = None) -> list[int | None]:
    """For each kernel name, the index of the template entry it is matched to, or None.

    `weights` scale each entry's match score; catch-all pre/post entries get less than layer
    entries so that a kernel a layer slot can take is never swallowed by them.
    """
    n, m = len(names), len(entries)
    if n == 0:
        return []
    if m == 0:
        return [None] * n
    neg = float("-inf")
    score = [[neg] * (m + 1) for _ in range(n + 1)]
    back = [[_NONE] * (m + 1) for _ in range(n + 1)]
    score[0][0] = 0.0
    skip_cost = [SKIP_OPTIONAL if e.optional else SKIP_REQUIRED for e in entries]
    match = [[_matches(e, name) for e in entries] for name in names]
    gain = [MATCH * w for w in weights] if weights is not None else [MATCH] * m
    for i in range(n + 1):
        row = score[i]
        nxt = score[i + 1] if i < n else None
        for j in range(m + 1):
            here = row[j]
            if here == neg:
                continue
            if j < m and here + skip_cost[j] > row[j + 1]:
                row[j + 1] = here + skip_cost[j]
                back[i][j + 1] = _ENTRY
            if nxt is None:
                continue
            if here + UNMATCHED > nxt[j]:
                nxt[j] = here + UNMATCHED
                back[i + 1][j] = _KERNEL
            if j < m and match[i][j] and here + gain[j] > nxt[j + 1]:
                nxt[j + 1] = here + gain[j]
                back[i + 1][j + 1] = _MATCH
            if j > 0 and entries[j - 1].repeat and match[i][j - 1] and back[i][j] in (_MATCH, _EXTEND):
                if here + gain[j - 1] > nxt[j]:
                    nxt[j] = here + gain[j - 1]
                    back[i + 1][j] = _EXTEND
    result: list[int | None] = [None] * n
    i, j = n, m
    while i > 0 or j > 0:
        move = back[i][j]
        if move == _ENTRY:
            j -= 1
        elif move == _KERNEL:
            i -= 1
        elif move == _MATCH:
            result[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif move == _EXTEND:
            result[i - 1] = j - 1
            i -= 1
        else:  # pragma: no cover - unreachable: every reached cell has a move
            raise AssertionError(f"alignment backtrack stuck at ({i}, {j})")
    return result
