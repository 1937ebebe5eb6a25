"""Busy versus exposed time across streams.

Busy time is a kernel's duration. Exposed time is the part of it during which no kernel ran on any
other stream: the shared experts under DeepEP combine, or two micro-batches, overlap, and only the
exposed part adds to the step's wall time.
"""
from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Sequence

import msgspec

from analysis.ingest.trace_model import Kernel


class StreamSummary(msgspec.Struct):
    rank: str
    stream: int
    kernels: int
    busy_us: float
    exposed_us: float  # busy time during which no other stream ran


def stream_summary(rows) -> list[StreamSummary]:
    """Busy and exposed time per (rank, stream), from KernelRows: how much the streams overlap."""
    acc: dict[tuple[str, int], list[float]] = {}
    for r in rows:
        cell = acc.setdefault((r.rank, r.stream), [0, 0.0, 0.0])
        cell[0] += 1
        cell[1] += r.busy_us
        cell[2] += r.exposed_us
    return [StreamSummary(rank, stream, int(n), busy, exposed) for (rank, stream), (n, busy, exposed) in sorted(acc.items())]


def merge_intervals(intervals: Iterable[tuple[float, float]], in_order: bool = False) -> list[tuple[float, float]]:
    """The union of the (start, end) intervals as disjoint pieces, by start. `in_order`: they
    already come by start (ties in any order give the same union), so no sort."""
    merged: list[tuple[float, float]] = []
    last_end = float("-inf")
    for start, end in (intervals if in_order else sorted(intervals)):
        if start <= last_end:  # merged is not empty: last_end is finite
            if end > last_end:
                merged[-1] = (merged[-1][0], end)
                last_end = end
        else:
            merged.append((start, end))
            last_end = end
    return merged


def exposed_durations(kernels: Sequence[Kernel]) -> list[float]:
    """For each kernel, its duration minus the time other streams were busy during it."""
    streams = [k.stream for k in kernels]
    distinct = set(streams)
    if len(distinct) < 2:
        return [k.dur_us for k in kernels]
    starts_all = [k.start_us for k in kernels]
    in_order = all(map(operator.le, starts_all, itertools.islice(starts_all, 1, None)))
    # each stream's kernels, by position in `kernels`
    positions = {stream: list(itertools.compress(range(len(streams)), map(stream.__eq__, streams)))
                 for stream in distinct}
    # each stream's own busy time (kernels in start order, as a step holds them, merge without a sort)
    ends_all = [start + k.dur_us for start, k in zip(starts_all, kernels)]
    own = {stream: merge_intervals(zip([starts_all[i] for i in members], [ends_all[i] for i in members]), in_order)
           for stream, members in positions.items()}
    # The other streams' busy time: a union of unions is the union, and merged intervals are the
    # union's pieces (their ends are the kernels' own times), so merging per stream first changes nothing.
    others: dict[int, tuple[list[tuple[float, float]], list[float]]] = {}
    for stream in distinct:
        parts = [own[s] for s in distinct if s != stream]
        merged = parts[0] if len(parts) == 1 else merge_intervals([iv for part in parts for iv in part])
        others[stream] = (merged, [iv[0] for iv in merged])
    # Each stream's kernels in one pass of their own: they come in start order (but for a few placed
    # late), so the search resumes where the previous kernel's began instead of bisecting again;
    # the sums are the same, term by term.
    result = [0.0] * len(kernels)
    bisect_right = bisect.bisect_right
    for stream, members in positions.items():
        merged, starts = others[stream]
        n = len(merged)
        ends = [iv[1] for iv in merged]
        last_start, i = None, 0
        for position in members:
            k = kernels[position]
            start, dur = k.start_us, k.dur_us
            end = start + dur
            if last_start is not None and last_start <= start:
                while i + 1 < n and starts[i + 1] <= start:
                    i += 1
            else:
                i = max(0, bisect_right(starts, start) - 1)
            last_start = start
            if ends[i] <= start and (i + 1 == n or starts[i + 1] >= end):
                # the busy interval before it has ended and the next begins after it: nothing covers it
                result[position] = dur if dur > 0.0 else 0.0
                continue
            total = 0.0
            j = i
            while j < n and merged[j][0] < end:
                lo, hi = merged[j]
                lo = start if start > lo else lo
                hi = end if end < hi else hi
                if hi > lo:
                    total += hi - lo
                j += 1
            covered = dur - total
            result[position] = covered if covered > 0.0 else 0.0
    return result
