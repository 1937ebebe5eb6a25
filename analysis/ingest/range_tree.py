"""Nested time ranges as one tree per thread: which ranges hold a time, and who encloses whom.

Why one: the profiler's nn.Module and Python-function ranges of one thread nest like the call
stack that made them, and three consumers ask the same questions of them (the module map's
roles, a signature's own module map, the model calls that cut steps). They all use this tree;
a rank builds its module-range tree once (RankTrace.module_tree).

A range's parent is the latest earlier range of its thread still open when it starts (ranges
sorted by start, longer first at equal starts). Profiler ranges nest, so the parent encloses the
child; where clocks make two ranges overlap without nesting, the parent merely overlaps it, which
is why `enclosing` checks each ancestor against the time asked about.
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol


class TimedRange(Protocol):
    """What the tree reads of a range (analysis.ingest.trace_model.Range, which builds a rank's tree)."""

    tid: int
    start_us: float
    dur_us: float

    @property
    def end_us(self) -> float: ...


def start_longest_first(r: TimedRange) -> tuple[float, float]:
    """Ranges in the order a tree reads them: by start, the enclosing (longer) one first."""
    return (r.start_us, -r.dur_us)


class RangeTree:
    """Nodes are numbered in tree order (per thread, by start, longer first); `source[n]` is
    node n's position in the list the tree was built from."""

    def __init__(self, ranges: Sequence[TimedRange]):
        self.ranges: list[TimedRange] = []
        self.parent: list[int] = []
        self.source: list[int] = []
        self._by_tid: dict[int, tuple[list[int], list[float]]] = {}
        grouped: dict[int, list[int]] = {}
        for position, r in enumerate(ranges):
            grouped.setdefault(r.tid, []).append(position)
        for tid, positions in grouped.items():
            positions.sort(key=lambda p: start_longest_first(ranges[p]))
            ids: list[int] = []
            stack: list[int] = []
            for p in positions:
                r = ranges[p]
                while stack and self.ranges[stack[-1]].end_us < r.start_us:
                    stack.pop()
                node = len(self.ranges)
                self.ranges.append(r)
                self.parent.append(stack[-1] if stack else -1)
                self.source.append(p)
                stack.append(node)
                ids.append(node)
            self._by_tid[tid] = (ids, [self.ranges[i].start_us for i in ids])

    def __len__(self) -> int:
        return len(self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def innermost(self, tid: int, t: float) -> int:
        """The innermost node that holds time t on thread tid, or -1."""
        entry = self._by_tid.get(tid)
        if entry is None:
            return -1
        ids, starts = entry
        pos = bisect.bisect_right(starts, t) - 1
        node = ids[pos] if pos >= 0 else -1
        ranges, parent = self.ranges, self.parent
        while node >= 0 and not (ranges[node].start_us <= t <= ranges[node].end_us):
            node = parent[node]
        return node

    def ancestors(self, node: int) -> list[int]:
        """node and its ancestors, innermost first."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parent[node]
        return out

    def enclosing(self, tid: int, t: float) -> list[TimedRange]:
        """The ranges that hold time t on thread tid, innermost first."""
        ranges = self.ranges
        return [ranges[n] for n in self.ancestors(self.innermost(tid, t)) if ranges[n].start_us <= t <= ranges[n].end_us]

    def roots(self) -> list[int]:
        """Nodes no earlier range of their thread encloses, in the order of the list the tree was built from."""
        return sorted((n for n, p in enumerate(self.parent) if p < 0), key=self.source.__getitem__)
