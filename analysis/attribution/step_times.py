"""A step's kernel times as arrays, read from its kernels once.

Why: the exposed time, the idle time, the step's span and busy time and the kernel columns each
walked a step's kernels again for the same three fields; read once into arrays, each is a few
array operations (#48, docs/performance.md).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from analysis.ingest.trace_model import Kernel

if TYPE_CHECKING:
    import numpy as np


class StepTimes:
    """`start_us`, `dur_us`, `end_us` (float64) and `stream` (int64) of a step's kernels, in their
    order; `streams`: the distinct streams."""

    __slots__ = ("start_us", "dur_us", "end_us", "stream", "stream_list", "streams")

    def __init__(self, start_us: np.ndarray, dur_us: np.ndarray, stream_list: list[int]):
        from analysis.numeric import np

        self.start_us, self.dur_us = start_us, dur_us
        self.end_us = start_us + dur_us  # the float a kernel's end_us gives
        self.stream_list = stream_list
        self.stream = np.array(stream_list, dtype=np.int64)
        self.streams = set(stream_list)

    @classmethod
    def of(cls, kernels: Sequence[Kernel]) -> StepTimes:
        from analysis.numeric import np

        return cls(np.array([k.start_us for k in kernels], dtype=np.float64),
                   np.array([k.dur_us for k in kernels], dtype=np.float64), [k.stream for k in kernels])

    @classmethod
    def shared(cls, start_us: np.ndarray, dur_us: np.ndarray, end_us: np.ndarray, stream_list: list[int],
               stream: np.ndarray, streams: set[int]) -> StepTimes:
        """Times of arrays already read (a step read with others of its shape: step_shapes.py), its streams
        (a list, an array, a set: never changed) shared with the steps that run on the same streams."""
        times = cls.__new__(cls)
        times.start_us, times.dur_us, times.end_us = start_us, dur_us, end_us
        times.stream_list, times.stream, times.streams = stream_list, stream, streams
        return times

    def __len__(self) -> int:
        return len(self.dur_us)

    def span_us(self) -> tuple[float, float]:
        """The first start and the last end (inf, -inf without kernels)."""
        if not len(self.dur_us):
            return float("inf"), float("-inf")
        return float(self.start_us.min()), float(self.end_us.max())

    def busy_us(self) -> float:
        """The durations summed one by one in order from 0, as a loop over the kernels would."""
        from analysis.numeric import sequential_sum

        return sequential_sum(self.dur_us, 0)
