"""Order-preserving alignment of a kernel sequence against a signature template.

Why dynamic programming: one kernel family appears in several slots of a layer (DeepGEMM for
q_a, q_b, o_proj, experts...), so a kernel's slot is decided by its position among its
neighbours, not by its name alone. The alignment maximises matched kernels while keeping the
template's order; optional slots may be skipped, repeat slots may take a run of kernels.
"""
from __future__ import annotations

import difflib
from collections.abc import Sequence

from analysis.attribution.signature import Entry

MATCH = 2.0
SKIP_REQUIRED = -1.0
SKIP_OPTIONAL = 0.0
UNMATCHED = -0.25
EXTEND_DISCOUNT = 0.99  # a repeat slot taking one more kernel scores a little less than a fresh slot,
# so when both explain a kernel equally the template's structure (one kernel per slot) wins

_NONE, _KERNEL, _ENTRY, _MATCH, _EXTEND = range(5)


def align(names: Sequence[str], entries: Sequence[Entry], weights: Sequence[float] | None = None) -> list[int | None]:
    return align_scored(names, entries, weights)[1]


def align_scored(
    names: Sequence[str], entries: Sequence[Entry], weights: Sequence[float] | None = None
) -> tuple[float, list[int | None]]:
    """For each kernel name, the index of the template entry it is matched to, or None.

    `weights` scale each entry's match score; catch-all pre/post entries get less than layer
    entries so that a kernel a layer slot can take is never swallowed by them.
    """
    n, m = len(names), len(entries)
    if n == 0:
        return 0.0, []
    if m == 0:
        return UNMATCHED * n, [None] * n
    neg = float("-inf")
    skip_cost = [SKIP_OPTIONAL if e.optional else SKIP_REQUIRED for e in entries]
    match = [[e.matches(name) for e in entries] for name in names]
    scale = list(weights) if weights is not None else [1.0] * m
    gain = [[MATCH * scale[j] * entries[j].weight_of(name) for j in range(m)] for name in names]
    # Two layers of state: free[i][j] (i kernels and j entries consumed) and inside[i][j] (the same,
    # with the last kernel matched to entry j-1, so a repeat entry may take the next kernel too).
    free = [[neg] * (m + 1) for _ in range(n + 1)]
    inside = [[neg] * (m + 1) for _ in range(n + 1)]
    back_free = [[(_NONE, 0)] * (m + 1) for _ in range(n + 1)]
    back_inside = [[_NONE] * (m + 1) for _ in range(n + 1)]
    free[0][0] = 0.0
    for i in range(n + 1):
        for j in range(m + 1):
            best = max(free[i][j], inside[i][j])
            if best == neg:
                continue
            came_inside = 1 if inside[i][j] >= free[i][j] else 0
            if j < m and best + skip_cost[j] > free[i][j + 1]:
                free[i][j + 1] = best + skip_cost[j]
                back_free[i][j + 1] = (_ENTRY, came_inside)
            if i == n:
                continue
            if best + UNMATCHED > free[i + 1][j]:
                free[i + 1][j] = best + UNMATCHED
                back_free[i + 1][j] = (_KERNEL, came_inside)
            if j < m and match[i][j] and best + gain[i][j] > inside[i + 1][j + 1]:
                inside[i + 1][j + 1] = best + gain[i][j]
                back_inside[i + 1][j + 1] = _MATCH + (10 if came_inside else 0)
            if j > 0 and entries[j - 1].repeat and match[i][j - 1] and inside[i][j] != neg:
                if inside[i][j] + gain[i][j - 1] * EXTEND_DISCOUNT > inside[i + 1][j]:
                    inside[i + 1][j] = inside[i][j] + gain[i][j - 1] * EXTEND_DISCOUNT
                    back_inside[i + 1][j] = _EXTEND
    result: list[int | None] = [None] * n
    i, j = n, m
    layer_inside = inside[n][m] > free[n][m]
    final = max(free[n][m], inside[n][m])
    while i > 0 or j > 0:
        if layer_inside:
            move = back_inside[i][j]
            result[i - 1] = j - 1
            if move == _EXTEND:
                i -= 1
                continue
            layer_inside = move >= 10  # the MATCH came from an inside state
            i, j = i - 1, j - 1
        else:
            move, from_inside = back_free[i][j]
            if move == _ENTRY:
                j -= 1
            elif move == _KERNEL:
                i -= 1
            else:  # pragma: no cover - unreachable: every reached cell has a move
                raise AssertionError(f"alignment backtrack stuck at ({i}, {j})")
            layer_inside = bool(from_inside)
    return final, result


def matching_pairs(a: Sequence, b: Sequence) -> list[tuple[int, int]]:
    """Index pairs (position in a, position in b) of equal items, in order: difflib's matching
    blocks, without its junk heuristic (a layer repeats the same kernel names many times)."""
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [(block.a + k, block.b + k) for block in matcher.get_matching_blocks() for k in range(block.size)]
