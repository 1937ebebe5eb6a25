"""The shortcuts the analysis takes for speed give what the plain definitions give.

Each fast function is held against a brute-force reading of its definition written here (it shares
no code with the function), on SYNTHETIC random inputs with a fixed seed: overlapping and touching
kernels, zero durations, several streams, kernels out of start order, points outside every window.
"""
from __future__ import annotations

import math
import random

import pytest

import analysis.attribution.chain as chain_module
from analysis.attribution.chain import OVERLAP_SLACK_US, _overlapped_loop, _overlapped_rows, main_chain
from analysis.attribution.overlap import exposed_durations
import analysis.attribution.steps as steps_module
from analysis.attribution.steps import _by_windows
from analysis.ingest.trace_loader import _BOUNDARY, _BOUNDARY_TRIES, _last_boundaries
from analysis.ingest.trace_model import Kernel, Range


def _kernels(rng: random.Random, n: int, streams: int, shuffled: bool) -> list[Kernel]:
    out, clock = [], 0.0
    for _ in range(n):
        clock += rng.choice([0.0, 0.5, 1.0, 2.5, 7.0])  # equal starts happen
        dur = rng.choice([0.0, 1.0, 2.0, 3.5, 10.0])
        out.append(Kernel("k", rng.randrange(streams), clock, dur, -1, "cudaLaunchKernel"))
    out.sort(key=lambda k: (k.start_us, k.stream))
    if shuffled:
        rng.shuffle(out)
    return out


def _covered_by_others(kernel: Kernel, others: list[Kernel]) -> float:
    """Length of [start, end] covered by the union of the other kernels' intervals: cut the span at
    every boundary and count the pieces some other kernel holds."""
    start, end = kernel.start_us, kernel.start_us + kernel.dur_us
    cuts = sorted({start, end, *(o.start_us for o in others if start < o.start_us < end),
                   *(o.start_us + o.dur_us for o in others if start < o.start_us + o.dur_us < end)})
    total = 0.0
    for lo, hi in zip(cuts, cuts[1:]):
        mid = (lo + hi) / 2
        if any(o.start_us <= mid <= o.start_us + o.dur_us for o in others):
            total += hi - lo
    return total


@pytest.mark.parametrize("streams", [1, 2, 3, 5])
@pytest.mark.parametrize("shuffled", [False, True])
def test_exposed_time_is_the_duration_less_what_other_streams_cover(streams, shuffled):
    rng = random.Random(streams * 10 + shuffled)
    for _ in range(20):
        kernels = _kernels(rng, 60, streams, shuffled)
        got = exposed_durations(kernels)
        for k, exposed in zip(kernels, got):
            others = [o for o in kernels if o.stream != k.stream]
            want = max(0.0, k.dur_us - _covered_by_others(k, others))
            assert math.isclose(exposed, want, abs_tol=1e-9), (k, exposed, want)


def test_a_long_kernel_beside_many_is_exposed_only_where_none_runs():
    """A kernel on a side stream across a whole step of short kernels with gaps between them (a
    persistent or waiting kernel): SYNTHETIC, exposed only in the gaps, read from the kernels."""
    rng = random.Random(17)
    main, clock = [], 0.0
    for _ in range(300):
        clock += rng.choice([0.0, 0.5, 2.0])  # gaps, and kernels that touch
        dur = rng.choice([0.0, 1.0, 3.5])
        main.append(Kernel("k", 0, clock, dur, -1, "cudaLaunchKernel"))
        clock += dur
    long = Kernel("wait", 1, 0.25, clock, -1, "cudaLaunchKernel")
    kernels = sorted([*main, long], key=lambda k: k.start_us)
    exposed = dict(zip(map(id, kernels), exposed_durations(kernels)))
    want = max(0.0, long.dur_us - _covered_by_others(long, main))
    assert 0.0 < want < long.dur_us
    assert math.isclose(exposed[id(long)], want, abs_tol=1e-9)
    for k in main:
        assert math.isclose(exposed[id(k)], max(0.0, k.dur_us - _covered_by_others(k, [long])), abs_tol=1e-9)


def test_the_chain_of_one_stream_is_every_kernel_in_start_order():
    rng = random.Random(7)
    kernels = _kernels(rng, 50, 1, shuffled=False)
    chain = main_chain([k.start_us for k in kernels], [k.start_us + k.dur_us for k in kernels],
                       [k.stream for k in kernels])
    assert [kernels[i].start_us for i in chain] == sorted(k.start_us for k in kernels)
    assert sorted(chain) == list(range(len(kernels)))


def test_the_chain_keeps_every_kernel_no_other_stream_overlaps():
    """A kernel that no kernel of another stream overlaps (the earlier one running more than the
    slack past the later one's start) is on the chain,
    whatever the streams: the sweep's shortcut (skip the streams when nothing runs past the kernel's
    start) must not lose one."""
    rng = random.Random(11)
    for _ in range(30):
        kernels = _kernels(rng, 40, 3, shuffled=False)
        starts = [k.start_us for k in kernels]
        ends = [k.start_us + k.dur_us for k in kernels]
        chain = set(main_chain(starts, ends, [k.stream for k in kernels]))
        def overlap(i: int, j: int) -> bool:
            """The earlier of the two (by start, then end) still runs past the later's start."""
            first, then = sorted((i, j), key=lambda x: (starts[x], ends[x], x))
            return ends[first] - starts[then] > OVERLAP_SLACK_US

        for i, k in enumerate(kernels):
            if not any(o.stream != k.stream and overlap(i, j) for j, o in enumerate(kernels)):
                assert i in chain, (i, k)


def test_a_kernel_is_overlapped_exactly_where_another_stream_runs_past_its_start():
    """Flagged: an earlier kernel of another stream (by start, then end) runs more than the slack
    past its start; and every flagged kernel overlaps some kernel of another stream that way."""
    rng = random.Random(13)
    for _ in range(30):
        kernels = _kernels(rng, 40, 3, shuffled=True)
        starts = [k.start_us for k in kernels]
        ends = [k.start_us + k.dur_us for k in kernels]
        streams = [k.stream for k in kernels]
        order = sorted(range(len(kernels)), key=lambda x: (starts[x], ends[x], x))
        rank = {x: n for n, x in enumerate(order)}
        swept = _overlapped_loop(order, starts, ends, streams)  # in the sweep's order
        flags = [swept[rank[i]] for i in range(len(kernels))]

        def runs_past(first: int, then: int) -> bool:
            return rank[first] < rank[then] and ends[first] - starts[then] > OVERLAP_SLACK_US

        for i in range(len(kernels)):
            others = [j for j in range(len(kernels)) if streams[j] != streams[i]]
            if any(runs_past(j, i) for j in others):
                assert flags[i], i
            if flags[i]:
                assert any(runs_past(j, i) or runs_past(i, j) for j in others), i


@pytest.mark.parametrize("chunk", [None, 7])
def test_kernels_go_to_the_latest_window_that_holds_their_point(chunk, monkeypatch):
    """Also with the kernels read a few at a time (chunk 7): a window's run cut at a chunk's end."""
    if chunk is not None:
        monkeypatch.setattr(steps_module, "_CHUNK", chunk)
    rng = random.Random(3)
    for _ in range(30):
        windows, clock = [], 0.0
        for _ in range(12):
            clock += rng.choice([0.0, 1.0, 4.0, 9.0])
            windows.append(Range("w", clock, rng.choice([0.0, 2.0, 5.0, 12.0]), 1))
        windows.sort(key=lambda w: w.start_us)
        kernels = _kernels(rng, 80, 2, shuffled=False)
        points = [None if rng.random() < 0.1 else rng.uniform(-5, clock + 20) for _ in kernels]
        buckets, rest = _by_windows(kernels, windows, points)
        want_buckets: list[list[Kernel]] = [[] for _ in windows]
        want_rest = []
        for kernel, point in zip(kernels, points):
            holding = [i for i, w in enumerate(windows) if point is not None and w.start_us <= point <= w.start_us + w.dur_us]
            (want_buckets[max(holding)] if holding else want_rest).append(kernel)
        assert buckets == want_buckets
        assert rest == want_rest


def test_slice_boundaries_found_near_the_end_are_the_last_ones_of_the_whole_slice():
    rng = random.Random(5)
    for size in (10, 200, 3000, 30000):  # small and large events: the 16 KB search holds all, some, none
        events = [f'{{"name": "{"x" * rng.randrange(size)}", "s": "}} , {{"}}' for _ in range(40)]
        data = bytearray(("[" + ",\n ".join(events) + "]").encode())
        end = len(data) - 1
        everything = [m.start() for m in _BOUNDARY.finditer(data, 1, end)]
        window = [m.start() for m in _BOUNDARY.finditer(data, max(1, end - 256 * 1024), end)]
        assert _last_boundaries(data, end) == (window or everything)[-_BOUNDARY_TRIES:]


@pytest.mark.parametrize("streams", [2, 3, 5])
def test_the_array_sweep_flags_what_the_loop_flags(streams):
    """A step's whole chain is swept by array passes (a row of them, or one row per step of a shape),
    a fork's few kernels by the loop: the same flags, kernel for kernel, on SYNTHETIC steps with ties,
    touching kernels and a subset swept."""
    import numpy as np

    rng = random.Random(streams)
    for _ in range(20):
        kernels = _kernels(rng, 300, streams, shuffled=False)
        starts = [k.start_us for k in kernels]
        ends = [k.start_us + k.dur_us for k in kernels]
        ids = [k.stream for k in kernels]
        order = sorted(range(len(kernels)), key=lambda x: (starts[x], ends[x], x))
        subset = [i for i in order if rng.random() < 0.7]
        for swept in (order, subset):
            want = _overlapped_loop(swept, starts, ends, ids)
            rows = _overlapped_rows(np.array(starts)[None, swept], np.array(ends)[None, swept], np.array(ids)[swept])
            assert rows.shape == (1, len(swept)) and rows[0].tolist() == want
            assert any(want) and not all(want)


@pytest.mark.parametrize("streams", [2, 3, 4])
def test_the_chain_from_a_steps_time_arrays_is_the_chain_from_its_lists(streams, monkeypatch):
    """chain_positions hands main_chain the step's time arrays beside the lists (the sweep reads them
    as they are instead of making arrays of the lists again). SYNTHETIC steps of several hundred
    kernels (the array sweep's size): in strict start order, with equal starts and shuffled (the
    kernels are sorted, so the arrays are read in the sweep's order, not the input's); anchors on some
    streams, so forks are read again on part of their streams. The chain is the one the lists give,
    with arrays and without, and the one the loop alone gives (no sweep by arrays at all)."""
    import numpy as np

    rng = random.Random(streams)
    for case in range(12):
        n = rng.randrange(200, 400)
        kernels = _kernels(rng, n, streams, shuffled=case % 3 == 2)
        if case % 3 == 0:  # strictly increasing starts: the arrays path
            clock = 0.0
            for k in kernels:
                clock += rng.choice([0.5, 1.0, 2.5, 7.0])
                k.start_us = clock
        starts = [k.start_us for k in kernels]
        ends = [k.start_us + k.dur_us for k in kernels]
        stream_list = [k.stream for k in kernels]
        anchors = [rng.random() < 0.3 and k.stream != 0 for k in kernels]
        arrays = (np.array(starts), np.array(ends), np.array(stream_list, dtype=np.int64))
        with monkeypatch.context() as patch:
            patch.setattr(chain_module, "ARRAY_SWEEP_FROM", 10**9)  # every sweep by the loop
            loop_only = main_chain(starts, ends, stream_list, anchors), main_chain(starts, ends, stream_list)
        assert main_chain(starts, ends, stream_list, anchors, arrays) == main_chain(starts, ends, stream_list, anchors)
        assert main_chain(starts, ends, stream_list, None, arrays) == main_chain(starts, ends, stream_list)
        assert (main_chain(starts, ends, stream_list, anchors), main_chain(starts, ends, stream_list)) == loop_only


def test_a_fork_read_again_on_its_anchored_streams_reads_its_own_times():
    """A SYNTHETIC step whose one long side-stream kernel overlaps all of it: the whole step is one
    fork, read again on its two anchored streams (a group of hundreds, the array sweep's size) from
    their own kernels' times, not the step's arrays. The chain is the one the lists alone give, and
    it holds no side-stream kernel."""
    import numpy as np

    rng = random.Random(7)
    kernels, clock = [Kernel("long", 0, 0.0, 5000.0, -1, "cudaLaunchKernel")], 0.0
    for i in range(300):
        clock += rng.choice([0.5, 1.0, 2.5])
        kernels.append(Kernel("k", 1 + i % 2, clock, rng.choice([0.2, 1.0, 4.0]), -1, "cudaLaunchKernel"))
    starts = [k.start_us for k in kernels]
    ends = [k.start_us + k.dur_us for k in kernels]
    streams = [k.stream for k in kernels]
    anchors = [k.stream != 0 and rng.random() < 0.5 for k in kernels]
    arrays = (np.array(starts), np.array(ends), np.array(streams, dtype=np.int64))
    chain = main_chain(starts, ends, streams, anchors)
    assert 0 not in chain and len(chain) > 100
    assert main_chain(starts, ends, streams, anchors, arrays) == chain
