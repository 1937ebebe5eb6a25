"""GPU idle inside a step: where each gap sits and what the host was doing when it began.

Why: a D4 table sums kernel time, but a step's wall time also holds stretches when no kernel ran on
any stream. Where they sit (before the layers, between two layers, inside one, after the layers)
and why they happened says whether a faster GPU, a CUDA graph or a faster host would help.

A gap is a stretch of the step's wall time (first kernel start to last kernel end) when no kernel,
copy or set ran on any stream. Its place: before the first layer kernel starts (`pre`), after the
last layer kernel ends (`post`), inside a layer when it lies within one layer's span (its first
kernel start to its last kernel end), else between layers. Its cause, read from the kernel that
ends it (the first to start at the gap's end) and that kernel's launch call (same correlation id):

- `host_launch`: the launch call began after the gap began: the GPU ran dry and waited for the host
  (Python, the scheduler, launch overhead);
- `host_sync`: the same, and the launching thread was inside a call that may block on the GPU
  (host_syncs.yaml) when the gap began: the host waited for the GPU, then the GPU for the host;
- `queued`: the launch call came before the gap began: the kernel was waiting on the GPU and ran
  late for a reason the trace does not show (another device, a peer, a graph's own dependencies);
- `unknown`: no launch call for the kernel in the trace.
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from analysis.ingest.trace_model import Kernel, Launch, Range

if TYPE_CHECKING:
    import numpy as np

    from analysis.attribution.step_times import StepTimes

PLACES = ("pre", "between", "inside", "post")
CAUSES = ("host_launch", "host_sync", "queued", "unknown")
# A kernel cannot start before the call that launched it began: in every real trace read here (86 files:
# H100, H200, H800, B200, B300, MI300X) each kernel starts 4.0 us or more after its launch call. One that
# starts more than this before it says the trace's CPU and GPU clocks disagree, and the causes read from
# the launch calls with them.
LAUNCH_ORDER_SLACK_US = 1.0


class StepIdle(msgspec.Struct):
    """One step's busy time on any stream and its idle time by place and by cause (us)."""

    busy_any_us: float
    idle_us: dict[str, float]  # by place (PLACES)
    cause_us: dict[str, float]  # by cause (CAUSES)


class LaunchClock:
    """When the host launched each kernel, and whether the launching thread sat in a blocking call."""

    def __init__(self, launches: Sequence[Launch], syncs: Sequence[Range]):
        self._launch = {launch.correlation: launch for launch in launches}
        self.before_launch = 0  # gaps whose causes were read from a kernel that started before its launch call
        self.before_launch_us = 0.0  # the most by which one did
        by_thread: dict[int, list[Range]] = {}
        for call in syncs:  # by start already (the loader sorts them)
            by_thread.setdefault(call.tid, []).append(call)
        self._syncs: dict[int, tuple[list[float], list[float]]] = {}
        for tid, calls in by_thread.items():
            ends, latest = [], float("-inf")
            for call in calls:  # the latest end among the calls begun so far: one bisect answers "inside one?"
                latest = max(latest, call.end_us)
                ends.append(latest)
            self._syncs[tid] = ([c.start_us for c in calls], ends)

    def thread_of(self, correlation: int) -> int | None:
        """The thread whose call launched this correlation id, or None."""
        launch = self._launch.get(correlation)
        return launch.tid if launch is not None else None

    def cause(self, kernel: Kernel, gap_start_us: float) -> str:
        """Why the GPU sat idle from gap_start_us until `kernel` started (CAUSES)."""
        launch = self._launch.get(kernel.correlation) if kernel.launcher != "cpu" else None
        if launch is None:
            return "unknown"
        ahead_us = launch.start_us - kernel.start_us
        if ahead_us > LAUNCH_ORDER_SLACK_US:  # said in the rank's notes (clock_note): its cause stays as read
            self.before_launch += 1
            self.before_launch_us = max(self.before_launch_us, ahead_us)
        if launch.start_us <= gap_start_us:
            return "queued"
        starts_ends = self._syncs.get(launch.tid)
        if starts_ends is not None:
            i = bisect.bisect_right(starts_ends[0], gap_start_us)
            if i and starts_ends[1][i - 1] >= gap_start_us:
                return "host_sync"
        return "host_launch"

    def clock_note(self) -> str:
        """What the rank's notes say where a gap's kernel started before its launch call, else ""."""
        if not self.before_launch:
            return ""
        return (f"{self.before_launch} GPU-idle gap(s) end at a kernel that started before its launch call began "
                f"(by up to {self.before_launch_us:.1f} us): the trace's CPU and GPU clocks disagree, so the idle "
                "time's causes (launched late, after a host sync, launched before the gap) are not reliable")


def step_idle(kernels: Sequence[Kernel], times: StepTimes, layer_of: np.ndarray, clock: LaunchClock) -> StepIdle:
    """`kernels` by start (a step's) and their `times`; `layer_of[i]` (int64): the layer unit of
    kernels[i], -1 outside layers. The gaps are found by array passes (a running maximum of the ends); each gap,
    and the busy pieces between them, is then summed in order, as a walk over the kernels would."""
    from analysis.numeric import np

    idle = dict.fromkeys(PLACES, 0.0)
    causes = dict.fromkeys(CAUSES, 0.0)
    if not len(times):
        return StepIdle(0.0, idle, causes)
    start, end = times.start_us, times.end_us
    places = _Places(*_layer_windows(times, layer_of))
    frontier = np.maximum.accumulate(end)  # the latest end up to each kernel, its own included
    gaps = (np.flatnonzero(start[1:] > frontier[:-1]) + 1).tolist()
    busy = 0.0
    piece_start = float(start[0])
    for k, gap_start, gap_end in zip(gaps, frontier[[g - 1 for g in gaps]].tolist(), start[gaps].tolist()):
        busy += gap_start - piece_start
        gap = gap_end - gap_start
        idle[places.of(gap_start, gap_end)] += gap
        causes[clock.cause(kernels[k], gap_start)] += gap
        piece_start = gap_end
    busy += float(frontier[-1]) - piece_start
    return StepIdle(busy, idle, causes)


def _layer_windows(times: StepTimes, unit: np.ndarray) -> tuple[list[float], list[float]]:
    """Each layer unit's span (its first start, its last end), by (start, end): their starts, and
    the latest end among the spans begun so far."""
    from analysis.numeric import np

    inside = np.flatnonzero(unit >= 0)
    if not len(inside):
        return [], []
    order = inside[np.argsort(unit[inside], kind="stable")]
    units = unit[order]
    heads = np.flatnonzero(np.concatenate(([True], units[1:] != units[:-1])))
    first = np.minimum.reduceat(times.start_us[order], heads)
    last = np.maximum.reduceat(times.end_us[order], heads)
    by_start = np.lexsort((last, first))
    return first[by_start].tolist(), np.maximum.accumulate(last[by_start]).tolist()


class _Places:
    """Where a gap lies among the layers' spans (overlapping under two micro-batches): `starts`, by
    start, and `reach`, the latest end among the spans begun so far."""

    def __init__(self, starts: list[float], reach: list[float]):
        self.starts, self.reach = starts, reach
        self.first = starts[0] if starts else float("inf")  # no layers: every gap is before them

    def of(self, start: float, end: float) -> str:
        if end <= self.first:
            return "pre"
        if start >= self.reach[-1]:
            return "post"
        # inside a span iff one begun by the gap's start reaches its end
        i = bisect.bisect_right(self.starts, start)
        return "inside" if i and self.reach[i - 1] >= end else "between"
