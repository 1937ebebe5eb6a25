"""How many streams run a kernel at each moment of a step: idle, exposed or overlapped time.

Why: only time when exactly one stream runs adds to the step's wall time as that stream's work
(exposed); while two or more run, all but one are hidden under the others (overlap); while none
runs, the GPU is idle. The to-scale timeline draws these pieces so the eye sees where the step goes.
Exposed + overlap adds up to the step row's busy_any_us (analysis/attribution/idle.py). Exposed here
is time, not kernels: StepRow.exposed_us sums each kernel's exposed part, so two kernels of one
stream that overlap (a programmatic dependent launch) count twice there and once here.
"""
from __future__ import annotations

from collections import defaultdict

from analysis.attribution.rows import KernelRow

IDLE, EXPOSED, OVERLAP = "idle", "exposed", "overlap"


def _kind(streams_running: int) -> str:
    return IDLE if streams_running == 0 else EXPOSED if streams_running == 1 else OVERLAP


def coverage(rows: list[KernelRow], start_us: float, end_us: float) -> list[tuple[float, float, str]]:
    """[start_us, end_us] cut into consecutive (start, end, kind) pieces, kind idle / exposed / overlap,
    neighbours of one kind merged."""
    changes: dict[float, list[tuple[int, int]]] = defaultdict(list)  # time -> (stream, +1 | -1)
    for r in rows:
        if r.busy_us > 0:
            changes[r.start_us].append((r.stream, 1))
            changes[r.start_us + r.busy_us].append((r.stream, -1))
    running: dict[int, int] = defaultdict(int)  # kernels in flight per stream
    pieces: list[tuple[float, float, str]] = []
    at, kind = start_us, IDLE
    for t in sorted(changes):
        if t > at and t > start_us:
            _append(pieces, max(at, start_us), min(t, end_us), kind)
        for stream, delta in changes[t]:
            running[stream] += delta
        at, kind = t, _kind(sum(1 for n in running.values() if n > 0))
    _append(pieces, max(at, start_us), end_us, kind)
    return pieces


def _append(pieces: list[tuple[float, float, str]], start: float, end: float, kind: str) -> None:
    if end <= start:
        return
    if pieces and pieces[-1][2] == kind and pieces[-1][1] == start:
        pieces[-1] = (pieces[-1][0], end, kind)
    else:
        pieces.append((start, end, kind))
