"""The main chain of a step whose layers hop between streams (a CUDA-graph replay over many streams).

Why: a captured graph runs its branches on streams of its own, so after a fork (the shared expert
beside the router and the routed experts) the layers may carry on on another stream: the busiest
stream then holds only some of the layers, and everything off it would pass for side work. The
chain is what runs one kernel after another through the step, whatever the stream: every kernel
that no other stream's kernel overlaps, and where kernels of several streams overlap (a fork),
those of the stream that carries on after the overlap. The rest is the side branch of a fork.

With streams that never overlap but for side work (SGLang's alternate stream beside the main one),
the chain is the main stream, as the busiest stream was.
"""
from __future__ import annotations

from collections.abc import Sequence

OVERLAP_SLACK_US = 0.5  # two kernels touching within this much do not overlap (clock rounding)


def main_chain(starts: Sequence[float], ends: Sequence[float], streams: Sequence[int]) -> list[int]:
    """Indices (into the inputs, sorted by start) of the chain's kernels, in start order."""
    order = sorted(range(len(starts)), key=lambda i: (starts[i], ends[i]))
    overlapped = _overlapped(order, starts, ends, streams)
    chain: list[int] = []
    pos = 0
    while pos < len(order):
        i = order[pos]
        if not overlapped[i]:
            chain.append(i)
            pos += 1
            continue
        # a fork: the run of overlapping kernels, then the stream that carries on after it
        end = pos
        while end < len(order) and overlapped[order[end]]:
            end += 1
        group = order[pos:end]
        after = order[end] if end < len(order) else None
        if after is not None:
            keep = streams[after]
        else:  # the step ends in the fork: the stream with the most busy time in it
            busy: dict[int, float] = {}
            for j in group:
                busy[streams[j]] = busy.get(streams[j], 0.0) + ends[j] - starts[j]
            keep = max(busy, key=lambda s: (busy[s], -s))
        chain.extend(j for j in group if streams[j] == keep)
        pos = end
    return chain


def _overlapped(order: list[int], starts, ends, streams) -> list[bool]:
    """Per kernel: does a kernel of another stream run during it?"""
    flags = [False] * len(starts)
    # latest end seen so far per stream, swept in start order
    open_until: dict[int, tuple[float, int]] = {}
    for i in order:
        for stream, (until, j) in open_until.items():
            if stream != streams[i] and until - starts[i] > OVERLAP_SLACK_US:
                flags[i] = flags[j] = True
        current = open_until.get(streams[i])
        if current is None or ends[i] > current[0]:
            open_until[streams[i]] = (ends[i], i)
    return flags
