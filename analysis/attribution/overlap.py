"""Busy versus exposed time across streams.

Busy time is a kernel's duration. Exposed time is the part of it during which no kernel ran on any
other stream: the shared experts under DeepEP combine, or two micro-batches, overlap, and only the
exposed part adds to the step's wall time.
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence

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


def merge_intervals(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _busy_of_others(kernels: Sequence[Kernel], stream: int, in_order: bool) -> list[tuple[float, float]]:
    """The merged busy intervals of every stream but `stream`. Kernels in start order (as a step
    holds them) merge as they come: the union does not depend on the order of equal starts."""
    if not in_order:
        return merge_intervals([(k.start_us, k.start_us + k.dur_us) for k in kernels if k.stream != stream])
    merged: list[tuple[float, float]] = []
    last_end = float("-inf")
    for k in kernels:
        if k.stream == stream:
            continue
        start = k.start_us
        end = start + k.dur_us
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
    positions: dict[int, list[int]] = {}  # each stream's kernels, by position in `kernels`
    in_order = True
    previous = float("-inf")
    for i, k in enumerate(kernels):
        positions.setdefault(k.stream, []).append(i)
        if k.start_us < previous:
            in_order = False
        previous = k.start_us
    if len(positions) < 2:
        return [k.dur_us for k in kernels]
    others: dict[int, tuple[list[tuple[float, float]], list[float]]] = {}
    for stream in positions:
        merged = _busy_of_others(kernels, stream, in_order)
        others[stream] = (merged, [iv[0] for iv in merged])
    # Each stream's kernels in one pass of their own: they come in start order (but for a few placed
    # late), so the search resumes where the previous kernel's began instead of bisecting again;
    # the sums are the same, term by term.
    result = [0.0] * len(kernels)
    bisect_right = bisect.bisect_right
    for stream, members in positions.items():
        merged, starts = others[stream]
        n = len(merged)
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


def wall_span_us(kernels: Sequence[Kernel]) -> float:
    if not kernels:
        return 0.0
    return max(k.end_us for k in kernels) - min(k.start_us for k in kernels)
