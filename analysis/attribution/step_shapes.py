"""Steps of one shape, read together.

Why: a decode replays one CUDA graph step after step, so its steps hold the same kernels on the same
streams, and reading each step's times and its chain across streams alone repeats a few dozen array
calls and a walk over the forks per step (the chain was about a tenth of the command's time after the
load on a 406 MB decode trace). Steps whose kernels run on the same streams with the same anchor
kernels, position by position, are read a block at a time: their times as one array per field (each
step's arrays are its row) and their chains in one sweep over all the rows (chain.main_chains_of),
which gives each step the chain it would get alone. A block is read when its first step is named, so
only a block's arrays are held beside the kernels (peak memory).
"""
from __future__ import annotations

from dataclasses import dataclass

from analysis.attribution.chain import main_chains_of
from analysis.attribution.step_times import StepTimes
from analysis.attribution.structure import chain_anchors
from analysis.attribution.two_batch_steps import step_two_batch_order

READ_TOGETHER_FROM = 4  # steps of one shape from which they are read together (fewer: each alone)
ROWS_AT_ONCE = 32  # steps of one shape read at once: the rows of the arrays and sweeps held at a time


@dataclass
class _Shape:
    """Steps whose kernels run on these streams with these anchors, position by position, in order."""

    stream_list: list[int]
    anchors: list[bool]
    steps: list


class StepShapes:
    """The rank's steps of shapes that READ_TOGETHER_FROM steps or more share on several streams; the
    others are read alone. Steps a two-batch reader claims are left out (their chains are read per
    micro-batch)."""

    def __init__(self, steps: list):
        self._waiting: dict[int, tuple[_Shape, int]] = {}  # step index -> its shape, its place there
        self._chains: dict[int, list[int]] = {}
        by_count: dict[int, list] = {}  # a first cut: steps of one shape have as many kernels
        for step in steps:
            if len(step.kernels) > 1 and step_two_batch_order(step) is None:
                by_count.setdefault(len(step.kernels), []).append(step)
        for members in by_count.values():
            if len(members) < READ_TOGETHER_FROM:
                continue
            shapes: dict[tuple, list] = {}
            for step in members:
                key = (tuple([k.stream for k in step.kernels]), tuple(chain_anchors(step.kernels)))
                shapes.setdefault(key, []).append(step)
            for (streams, anchors), alike in shapes.items():
                if len(alike) >= READ_TOGETHER_FROM and len(set(streams)) > 1:
                    shape = _Shape(list(streams), list(anchors), alike)
                    self._waiting.update((step.index, (shape, place)) for place, step in enumerate(alike))

    def chain_of(self, step) -> list[int] | None:
        """The step's chain's positions (as structure.chain_positions gives them), with its times set
        (step.times), where it was read with others of its shape; its block is read now if it was not."""
        found = self._waiting.get(step.index)
        if found is not None:
            shape, place = found
            block = [s for s in shape.steps[place:place + ROWS_AT_ONCE] if s.index in self._waiting]
            for s in block:
                del self._waiting[s.index]
            self._read(shape, block)
        return self._chains.pop(step.index, None)

    def _read(self, shape: _Shape, block: list) -> None:
        from analysis.numeric import np

        size = (len(block), len(shape.stream_list))
        start_us, dur_us = np.empty(size, dtype=np.float64), np.empty(size, dtype=np.float64)
        for row, step in enumerate(block):  # step by step: a step's kernel objects are read while in cache
            start_us[row] = [k.start_us for k in step.kernels]
            dur_us[row] = [k.dur_us for k in step.kernels]
        end_us = start_us + dur_us
        stream, streams = np.array(shape.stream_list, dtype=np.int64), set(shape.stream_list)
        for row, step in enumerate(block):
            step.times = StepTimes.shared(start_us[row], dur_us[row], end_us[row], shape.stream_list, stream, streams)
        rising = np.flatnonzero(np.all(start_us[:, 1:] > start_us[:, :-1], axis=1))  # main_chain's test
        if len(rising):  # a step with two kernels starting at once is left alone: the chain sorts its order
            found = main_chains_of(start_us[rising], end_us[rising], shape.stream_list, shape.anchors)
            for row, chain in zip(rising.tolist(), found):
                self._chains[block[row].index] = chain
