"""Steps of one shape read together (analysis/attribution/step_shapes.py, chain.main_chains_of) get the
chains and times they get alone.

The truth is main_chain of each step alone with every sweep taken by the loop (no array pass: the
batch's sweeps over rows share no code with it), on SYNTHETIC steps generated with a fixed seed: a
shape of kernels on several streams, each step of it with its own times, so the steps part where
their overlaps or their busiest streams differ.
"""
from __future__ import annotations

import random

import pytest

import analysis.attribution.chain as chain_module
from analysis.attribution.chain import main_chain, main_chains_of
from analysis.attribution.step_shapes import READ_TOGETHER_FROM, ROWS_AT_ONCE, StepShapes
from analysis.attribution.step_times import StepTimes
from analysis.attribution.steps import Step
from analysis.attribution.structure import chain_positions
from analysis.ingest.trace_model import Kernel


def _shape(rng: random.Random, n: int, streams: int) -> tuple[list[int], list[bool]]:
    """Each position's stream and whether it is an anchor kernel (the layers' own line)."""
    stream_of = [rng.randrange(streams) for _ in range(n)]
    return stream_of, [s != 0 and rng.random() < 0.4 for s in stream_of]


def _times(rng: random.Random, n: int) -> tuple[list[float], list[float]]:
    """Starts that rise strictly (a step's kernels by start) and durations that make kernels of other
    streams overlap now and then, differently step by step."""
    starts, ends, clock = [], [], 0.0
    for _ in range(n):
        clock += rng.choice([0.5, 1.0, 2.0, 3.0])
        starts.append(clock)
        ends.append(clock + rng.choice([0.25, 1.0, 2.0, 4.0, 9.0]))
    return starts, ends


def _alone(starts, ends, streams, anchors, monkeypatch) -> list[int]:
    with monkeypatch.context() as patch:
        patch.setattr(chain_module, "ARRAY_SWEEP_FROM", 10**9)  # every sweep by the loop
        return main_chain(starts, ends, streams, anchors)


@pytest.mark.parametrize("n,streams", [(40, 2), (90, 3), (300, 2), (260, 4)])
def test_each_row_gets_the_chain_it_gets_alone(n, streams, monkeypatch):
    import numpy as np

    rng = random.Random(n * 10 + streams)
    parted = 0
    for case in range(6):
        stream_of, anchors = _shape(rng, n, streams)
        marked = anchors if case % 2 else None  # timing alone, or anchors that read forks again
        rows = [_times(rng, n) for _ in range(12)]
        starts = np.array([r[0] for r in rows])
        ends = np.array([r[1] for r in rows])
        together = main_chains_of(starts, ends, stream_of, marked)
        alone = [_alone(r[0], r[1], stream_of, marked, monkeypatch) for r in rows]
        assert together == alone
        parted += len({tuple(c) for c in alone}) > 1
    assert parted == 6  # the steps of each shape do not all share one chain: the rows part


def test_rows_part_at_a_forks_busiest_stream(monkeypatch):
    """A step that ends in a fork of two streams without anchors keeps the stream with the most busy time
    there, the lower stream where both are as busy: the steps overlap alike, and part by which stream
    is busier (stream 1 busier, stream 0 busier, equally busy)."""
    import numpy as np

    parts = []
    busiest = chain_module._busiest_streams

    def spy(*args):
        found = busiest(*args)
        parts.append(len(found))
        return found

    rows = []
    for tail_us in (14.0, 1.0, 10.0, 14.0):  # stream 1's last kernel: busier, less busy, as busy as stream 0
        starts = [0.0, 2.0, 4.0, 100.0, 101.0]
        ends = [1.0, 3.0, 5.0, 110.0, 101.0 + tail_us]
        rows.append((starts, ends))
    streams = [0, 0, 1, 0, 1]
    alone = [_alone(s, e, streams, None, monkeypatch) for s, e in rows]
    monkeypatch.setattr(chain_module, "_busiest_streams", spy)
    together = main_chains_of(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), streams, None)
    assert together == alone == [[0, 1, 2, 4], [0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 4]]
    assert parts == [2]


def test_rows_that_part_keep_their_own_chains_when_a_fork_is_read_again(monkeypatch):
    """One long side-stream kernel over the whole step makes it one fork, read again on its anchored
    streams; in half the steps a kernel of stream 2 runs long past the next one of stream 1, so those
    steps' second reading forks where the others' does not."""
    import numpy as np

    rows = []
    for r in range(8):
        starts, ends, streams = [0.0], [5000.0], [0]
        clock = 0.0
        for i in range(200):
            clock += 2.0
            starts.append(clock)
            ends.append(clock + (30.0 if (r % 2 and i == 101) else 1.0))
            streams.append(1 + i % 2)
        rows.append((starts, ends))
    anchors = [s != 0 for s in streams]
    together = main_chains_of(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), streams, anchors)
    alone = [_alone(s, e, streams, anchors, monkeypatch) for s, e in rows]
    assert together == alone and together[0] != together[1] and 0 not in together[0]


def _step(index: int, starts: list[float], durs: list[float], streams: list[int], names: list[str]) -> Step:
    kernels = [Kernel(name, stream, start, dur, index * 1000 + i, "cudaGraphLaunch")
               for i, (name, stream, start, dur) in enumerate(zip(names, streams, starts, durs))]
    return Step(index=index, stage="decode", kernels=kernels, segmented_by="gpu_annotation")


def test_steps_read_together_get_their_own_times_and_chains():
    """SYNTHETIC steps: five of one shape on two streams (one of them with two kernels starting at once),
    three of another (too few to read together), five on one stream, one a two-batch reader claims,
    and then more steps of the first shape than a block holds. Each step of a shape that four steps or
    more share on several streams has its times when it is asked for its chain (rows of one array each,
    the values StepTimes.of reads) and a chain, but the one with the tie; the chain is the one
    chain_positions gives the step alone. A block is read when its first step is asked: the steps after
    it have no times yet."""
    rng = random.Random(5)
    names = ["attention_fwd" if i % 7 == 3 else f"gemm_{i % 5}" for i in range(60)]
    two = [0 if i % 3 else 1 for i in range(60)]
    steps = []

    def add(stream_of, tie=False):
        starts, ends = _times(rng, len(stream_of))
        if tie:
            starts[10] = starts[9]
        steps.append(_step(len(steps), starts, [e - s for s, e in zip(starts, ends)], stream_of, names))

    for i in range(5):
        add(two, tie=i == 2)
    other = [1 - s for s in two]
    for _ in range(3):
        add(other)
    for _ in range(5):
        add([0] * 60)
    add(two)
    claimed = steps[-1].index
    for _ in range(2 * ROWS_AT_ONCE + 3):
        add(two)
    for step in steps:
        step.__dict__["_two_batch"] = object() if step.index == claimed else None  # claimed: the two-batch reader's
    shapes = StepShapes(steps)
    read_together = set()
    for step in steps:
        if step.index == 14:  # read with the shape's first block, as steps 0-4 were; the next block not yet
            assert steps[14].times is not None and steps[14 + ROWS_AT_ONCE].times is None
        chain = shapes.chain_of(step)
        if chain is None:
            assert step.times is None or step.index < 14  # read alone, or read with its block, tie and all
            continue
        read_together.add(step.index)
        alone = StepTimes.of(step.kernels)
        assert step.times.start_us.tolist() == alone.start_us.tolist()
        assert step.times.end_us.tolist() == alone.end_us.tolist()
        assert step.times.dur_us.tolist() == alone.dur_us.tolist()
        assert step.times.stream_list == alone.stream_list and step.times.streams == alone.streams
        assert chain == chain_positions(step.kernels, alone)
    assert read_together == {0, 1, 3, 4, *range(14, len(steps))}
    assert steps[2].times is not None  # the tie: its times read with its shape, its chain left to it alone
    assert READ_TOGETHER_FROM == 4  # the counts above are set against it
