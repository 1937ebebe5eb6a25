"""Every step holds its kernels in start order, also the kernels launched outside every step window.

Why: the trace's kernels come by start (the loader sorts them), and the step cut hands them out in
that order, so it does not sort each step again (a pass over every kernel of a large trace); only the
steps that take in kernels launched outside the windows (another thread's copies, work launched between
two steps) are sorted where those are added. The attribution reads a step's kernels as a line in time
(the chain across streams, the idle gaps): a step out of order would misplace them without an error.
SYNTHETIC traces with hand-written answers.
"""
from __future__ import annotations

from analysis.attribution.steps import segment_steps
from analysis.ingest.trace_model import Kernel, Launch, Range, RankId, RankTrace


def _trace(in_windows: list[tuple[str, float, float]], outside: list[tuple[str, float, float]]) -> RankTrace:
    """SYNTHETIC: two CPU step windows, [0, 100] and [200, 300] us; kernels (name, launch call start, run
    start) launched inside them on stream 7, the `outside` ones launched between the windows on stream 8.
    The kernels come by start, as the loader gives them."""
    cpu = [Range("step[DECODE bs=4]", 0.0, 100.0, 1), Range("step[DECODE bs=4]", 200.0, 100.0, 1)]
    kernels, launches = [], []
    for stream, group in ((7, in_windows), (8, outside)):
        for name, launched_us, start_us in group:
            correlation = len(launches)
            kernels.append(Kernel(name, stream, start_us, 2.0, correlation, "cudaLaunchKernel"))
            launches.append(Launch("cudaLaunchKernel", launched_us, 1, correlation))
    kernels.sort(key=lambda k: (k.start_us, k.stream))
    launches.sort(key=lambda launch: launch.start_us)
    return RankTrace("synthetic", RankId(), None, kernels, [], cpu, [], launches)


def _names(trace: RankTrace) -> list[list[str]]:
    return [[k.name for k in step.kernels] for step in segment_steps(trace)]


# ten kernels a window, launched inside it, each running 1 us after its launch call
_FIRST = [(f"a{i}", 5.0 + 9 * i, 6.0 + 9 * i) for i in range(10)]  # run at 6, 15, ..., 87 us
_SECOND = [(f"b{i}", 205.0 + 9 * i, 206.0 + 9 * i) for i in range(10)]  # run at 206, 215, ..., 287 us


def test_synthetic_kernels_launched_between_the_windows_join_the_step_they_ran_in_at_their_place():
    # launched at 150 and 160 us (outside both windows), they ran inside the first step and the second
    outside = [("x", 150.0, 30.0), ("y", 160.0, 250.0)]
    steps = _names(_trace(_FIRST + _SECOND, outside))
    assert steps == [["a0", "a1", "a2", "x", "a3", "a4", "a5", "a6", "a7", "a8", "a9"],
                     ["b0", "b1", "b2", "b3", "b4", "y", "b5", "b6", "b7", "b8", "b9"]]


def test_synthetic_a_kernel_that_starts_with_a_step_kernel_comes_after_it():
    # x runs at 15 us, as a1 does: ties keep the order in which they came (a1 was the step's first)
    steps = _names(_trace(_FIRST + _SECOND, [("x", 150.0, 15.0)]))
    assert steps[0][:4] == ["a0", "a1", "x", "a2"]
    assert steps[1] == [f"b{i}" for i in range(10)]


def test_synthetic_every_step_is_in_start_order_whatever_joins_it():
    outside = [("x", 150.0, 90.0), ("y", 160.0, 1.0), ("z", 170.0, 207.0), ("w", 180.0, 120.0)]
    for step in segment_steps(_trace(_FIRST + _SECOND, outside)):
        starts = [k.start_us for k in step.kernels]
        assert starts == sorted(starts), [k.name for k in step.kernels]
    # y ran before the first step's first kernel: the first step's; w ran between the steps: the
    # first step's too (the one before it); z at 207 us, inside the second
    steps = _names(_trace(_FIRST + _SECOND, outside))
    assert steps[0][0] == "y" and steps[0][-2:] == ["x", "w"] and steps[1][:2] == ["b0", "z"]
