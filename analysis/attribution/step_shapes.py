"""Steps of one shape, read together.

Why: a decode replays one CUDA graph step after step, so its steps hold the same kernels on the same
streams, and reading each step's times and its chain across streams alone repeats a few dozen array
calls and a walk over the forks per step (the chain was about a tenth of the command's time after the
load on a 406 MB decode trace). Steps of as many kernels have their times read as one array per field
(each step's arrays are its row); those whose kernels run on the same streams with the same anchor
kernels, position by position, have their chains read in one sweep over all their rows
(chain.main_chains_of), which gives each step the chain it would get alone.
"""
from __future__ import annotations

from analysis.attribution.chain import ANCHOR_CLASSES, main_chains_of
from analysis.attribution.step_times import StepTimes
from analysis.attribution.two_batch_steps import step_two_batch_order
from analysis.ingest.kernel_classes import class_test

READ_TOGETHER_FROM = 4  # steps of one shape from which they are read together (fewer: each alone)


def read_steps_together(steps: list) -> dict[int, list[int]]:
    """The times (step.times) of each step that READ_TOGETHER_FROM steps or more match in kernel count,
    and the chain (step.index -> positions, as structure.chain_positions gives them) of each step of a
    shape that many steps share on several streams. Steps a two-batch reader claims and steps with two
    kernels starting at once (their order is the chain's to sort) are left to be read alone."""
    from analysis.numeric import np

    by_count: dict[int, list] = {}
    for step in steps:
        if len(step.kernels) > 1 and step_two_batch_order(step) is None:
            by_count.setdefault(len(step.kernels), []).append(step)
    chains: dict[int, list[int]] = {}
    for count, members in by_count.items():
        if len(members) < READ_TOGETHER_FROM:
            continue
        shape = (len(members), count)
        start_us, dur_us = np.empty(shape, dtype=np.float64), np.empty(shape, dtype=np.float64)
        stream = np.empty(shape, dtype=np.int64)
        for row, step in enumerate(members):  # step by step: a step's kernel objects are read while in cache
            kernels = step.kernels
            start_us[row] = [k.start_us for k in kernels]
            dur_us[row] = [k.dur_us for k in kernels]
            stream[row] = [k.stream for k in kernels]
        end_us = start_us + dur_us
        several = bool((stream != stream[:, :1]).any())
        if several:  # the chain's anchors: only a step on several streams has a chain to read
            is_anchor = class_test(ANCHOR_CLASSES)
            anchor = np.empty(shape, dtype=bool)
            for row, step in enumerate(members):
                anchor[row] = [is_anchor[k.root or k.name] for k in step.kernels]
        alike: dict[bytes, list[int]] = {}
        for row in range(len(members)):
            key = stream[row].tobytes() + anchor[row].tobytes() if several else stream[row].tobytes()
            alike.setdefault(key, []).append(row)
        for rows in alike.values():
            stream_list = stream[rows[0]].tolist()
            streams = set(stream_list)
            for row in rows:
                members[row].times = StepTimes.shared(start_us[row], dur_us[row], end_us[row], stream_list,
                                                      stream[rows[0]], streams)
            if len(rows) < READ_TOGETHER_FROM or len(streams) < 2:
                continue
            picked = np.array(rows)
            rising = picked[np.all(start_us[picked, 1:] > start_us[picked, :-1], axis=1)]  # main_chain's test
            if len(rising):
                found = main_chains_of(start_us[rising], end_us[rising], stream_list, anchor[rows[0]].tolist())
                for row, chain in zip(rising.tolist(), found):
                    chains[members[row].index] = chain
    return chains
