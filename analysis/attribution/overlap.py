"""Busy versus exposed time across streams.

Busy time is a kernel's duration. Exposed time is the part of it during which no kernel ran on any
other stream: the shared experts under DeepEP combine, or two micro-batches, overlap, and only the
exposed part adds to the step's wall time.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import msgspec

from analysis.attribution.step_times import StepTimes
from analysis.ingest.trace_model import Kernel

if TYPE_CHECKING:
    import numpy as np


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
    return exposed_of_times(StepTimes.of(kernels)).tolist()


_FEW_PIECES = 4  # pieces a kernel overlaps up to which the pieces are taken k-th by k-th for all kernels


def exposed_of_times(times: StepTimes) -> np.ndarray:
    """exposed_durations of a step's kernels from their times (float64, in the kernels' order).

    Array passes, stream by stream: the other streams' intervals merged into disjoint pieces (a
    running maximum of the ends over them by (start, end)), then each kernel's overlap with the pieces
    from the last one begun by its start to the last one begun before its end, summed piece by piece
    in that order and taken from its duration: the float operations, and their order, of a walk over
    the pieces, so no value moves against one (tests/test_fast_paths.py holds it to the definition).
    A kernel beside more than _FEW_PIECES pieces (a long kernel on a side stream beside a step's many)
    sums its own at once: taken k-th by k-th, it made as many passes as it has pieces."""
    from analysis.numeric import np, sequential_sum

    dur, stream = times.dur_us, times.stream
    if len(times.streams) < 2:
        return dur
    start, end = times.start_us, times.end_us
    total = np.zeros(len(dur))
    for own in times.streams:
        other = stream != own
        mine = np.flatnonzero(~other)
        order = np.lexsort((end[other], start[other]))
        other_start, other_end = start[other][order], end[other][order]
        reach = np.maximum.accumulate(other_end)
        heads = np.flatnonzero(np.concatenate(([True], other_start[1:] > reach[:-1])))
        piece_lo = other_start[heads]
        piece_hi = reach[np.append(heads[1:] - 1, len(reach) - 1)]
        k_start, k_end = start[mine], end[mine]
        first = np.maximum(np.searchsorted(piece_lo, k_start, side="right") - 1, 0)
        pieces = np.searchsorted(piece_lo, k_end, side="left") - first
        covered = np.zeros(len(mine))
        live, step = np.flatnonzero((pieces > 0) & (pieces <= _FEW_PIECES)), 0
        while len(live):  # the k-th piece of every kernel that has one: most have none or one
            at = first[live] + step
            part = np.minimum(k_end[live], piece_hi[at]) - np.maximum(k_start[live], piece_lo[at])
            covered[live] += np.where(part > 0.0, part, 0.0)
            step += 1
            live = live[pieces[live] > step]
        for k in np.flatnonzero(pieces > _FEW_PIECES).tolist():  # a long kernel beside many: its pieces at once
            lo, hi = first[k], first[k] + pieces[k]
            part = np.minimum(k_end[k], piece_hi[lo:hi]) - np.maximum(k_start[k], piece_lo[lo:hi])
            covered[k] = sequential_sum(np.where(part > 0.0, part, 0.0))
        total[mine] = covered
    exposed = dur - total
    return np.where(exposed > 0.0, exposed, 0.0)
