"""The main chain of a step whose layers hop between streams (a CUDA-graph replay over many streams).

Why: a captured graph runs its branches on streams of its own, so after a fork (the shared expert
beside the router and the routed experts) the layers may carry on on another stream: the busiest
stream then holds only some of the layers, and everything off it would pass for side work. The
chain is what runs one kernel after another through the step, whatever the stream: every kernel
that no other stream's kernel overlaps, and where kernels of several streams overlap (a fork),
the anchor kernels decide (attention cores, routing, dispatch / combine, expert GEMMs: the layers'
own line, which a shared expert's MLP never runs): streams of the overlap without one are side
work, and the chain is read again on the others alone (so a kernel running beside many layers
does not hide them); where every stream or none runs anchors, the stream with the most, else the
stream that carries on after the overlap, else the busiest in it. The rest is side work.

With streams that never overlap but for side work (SGLang's alternate stream beside the main one),
the chain is the main stream, as the busiest stream was.
"""
from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

from analysis.ingest.kernel_classes import EXPERT_PATH, ROUTING

# kernel classes (kernel_classes.yaml) of the layers' own line: a fork's branch running them is the chain
ANCHOR_CLASSES = frozenset({"attn_core"}) | ROUTING | EXPERT_PATH
OVERLAP_SLACK_US = 0.5  # two kernels touching within this much do not overlap (clock rounding)


def main_chain(starts: Sequence[float], ends: Sequence[float], streams: Sequence[int],
               anchors: Sequence[bool] | None = None, arrays: tuple | None = None) -> list[int]:
    """Indices (into the inputs, sorted by start) of the chain's kernels, in start order.
    `anchors` marks the kernels that belong to the layers' own line (none marked: timing alone);
    `arrays`: the same starts, ends and streams as numpy arrays, where the caller holds them."""
    if all(map(operator.lt, starts, itertools.islice(starts, 1, None))):  # a step's kernels: already in order
        order = list(range(len(starts)))
    else:  # by (start, end), ties in input order: two stable sorts on one key each (cheaper than on pairs)
        order = sorted(range(len(starts)), key=ends.__getitem__)
        order.sort(key=starts.__getitem__)
        arrays = None  # in another order than the sweep's
    return _without_side_trips(_chain(order, starts, ends, streams, anchors, None, arrays), streams, anchors)


def _without_side_trips(chain: list[int], streams: Sequence[int], anchors: Sequence[bool] | None) -> list[int]:
    """The chain without its side trips: a run of chain kernels, between chain kernels of one other
    stream, on a stream that runs no anchor kernel in the whole step (the layers' own line never runs
    there, as it does on the streams a graph replay's layers hop to). Why: timing alone puts a
    side-stream kernel that happens to overlap nothing on the chain; SGLang's shared expert on its own
    stream beside the gate often has such kernels (its quantisation before the router's top-k begins,
    its down GEMM after the top-k ended), and on the chain they shifted the layer's roles (seen on real
    0.5.17 eager decodes without stacks and prefill: the shared GEMMs named router and routed experts).
    One stream runs in order: the trip is that stream's side work, as the kernels beside it are."""
    if anchors is None or len(chain) < 3:
        return chain
    line_streams = {stream for stream, anchor in zip(streams, anchors) if anchor}
    kept: list[int] = []
    pos, n = 0, len(chain)
    while pos < n:
        stream = streams[chain[pos]]
        end = pos
        while end < n and streams[chain[end]] == stream:
            end += 1
        trip = (0 < pos and end < n and stream not in line_streams
                and streams[chain[pos - 1]] == streams[chain[end]] != stream)
        if not trip:
            kept.extend(chain[pos:end])
        pos = end
    return kept


def _chain(order: list[int], starts, ends, streams, anchors, after_all: int | None, arrays: tuple | None = None
           ) -> list[int]:
    """The chain of the kernels `order` (in start order); `after_all` is the kernel after them, if any;
    `arrays`: the starts, ends and streams of the kernels `order` as arrays, in that order."""
    overlapped = _overlapped(order, starts, ends, streams, arrays)
    chain: list[int] = []
    pos, n = 0, len(order)
    while pos < n:
        # the run of kernels that nothing overlaps is the chain's; then a fork: the run of
        # overlapping kernels, and the stream that carries on after it (list.index: a scan in C)
        fork = _index_of(overlapped, True, pos, n)
        chain.extend(order[pos:fork])
        if fork == n:
            break
        end = _index_of(overlapped, False, fork, n)
        group = order[fork:end]
        after = order[end] if end < n else after_all
        pos = end
        anchored = _anchored_streams(group, streams, anchors)
        if anchored and len(anchored) < len({streams[j] for j in group}):
            # streams without a kernel of the layers' own line are side work (a shared expert, or a
            # kernel that runs beside many layers): the chain is read again without them
            chain.extend(_chain([j for j in group if streams[j] in anchored], starts, ends, streams, anchors, after))
            continue
        keep = _most_anchored(anchored)
        if keep is None and after is not None:
            keep = streams[after]
        if keep is None or keep not in {streams[j] for j in group}:  # the stream with the most busy time in it
            busy: dict[int, float] = {}
            for j in group:
                busy[streams[j]] = busy.get(streams[j], 0.0) + ends[j] - starts[j]
            keep = max(busy, key=lambda s: (busy[s], -s))
        chain.extend(j for j in group if streams[j] == keep)
    return chain


def _index_of(flags: list[bool], value: bool, start: int, n: int) -> int:
    """The first position from `start` whose flag is `value`, or n."""
    try:
        return flags.index(value, start)
    except ValueError:
        return n


def _anchored_streams(group: list[int], streams: Sequence[int], anchors: Sequence[bool] | None) -> dict[int, int]:
    """Per stream of a fork, how many anchor kernels it runs there (streams with none left out)."""
    counts: dict[int, int] = {}
    if anchors is not None:
        for j in group:
            if anchors[j]:
                counts[streams[j]] = counts.get(streams[j], 0) + 1
    return counts


def _most_anchored(counts: dict[int, int]) -> int | None:
    """The stream with the most anchor kernels, or None where none or a tie decides it."""
    ranked = sorted(counts.values(), reverse=True)
    if not ranked or (len(ranked) > 1 and ranked[0] == ranked[1]):
        return None
    return max(counts, key=lambda s: counts[s])


ARRAY_SWEEP_FROM = 128  # kernels in a sweep from which array passes beat the loop (a step's whole chain)


def _overlapped(order: list[int], starts, ends, streams, arrays: tuple | None = None) -> list[bool]:
    """Per kernel of the sweep `order` (in its order): does a kernel of another stream run during it?
    `arrays`: its starts, ends and streams as arrays in the sweep's order (the step's times)."""
    if len(order) < ARRAY_SWEEP_FROM:
        return _overlapped_loop(order, starts, ends, streams)
    if arrays is not None:
        return _overlapped_of_arrays(*arrays)
    return _overlapped_arrays(order, starts, ends, streams)


def _overlapped_arrays(order: list[int], starts, ends, streams) -> list[bool]:
    """_overlapped_of_arrays of the kernels `order`, their times made into arrays."""
    from analysis.numeric import np

    at = np.array(order, dtype=np.int64)
    return _overlapped_of_arrays(np.array(starts, dtype=np.float64)[at], np.array(ends, dtype=np.float64)[at],
                                 np.array(streams, dtype=np.int64)[at])


def _overlapped_of_arrays(start, end, stream) -> list[bool]:
    """_overlapped_loop's flags from array passes, stream by stream: the latest end of the stream's
    kernels before each kernel in the sweep (a running maximum), and the kernel that first reached it;
    a kernel of another stream that it runs past by more than the slack flags both. Only comparisons
    and one subtraction a pair, as in the loop, so the flags are the loop's. The arrays are in the
    sweep's order (float64 starts and ends, int64 streams)."""
    from analysis.numeric import np

    flags = np.zeros(len(start), dtype=bool)
    positions = np.arange(len(start))
    for own in set(stream.tolist()):  # not np.unique: it imports numpy.ma
        mine = stream == own
        reach = np.maximum.accumulate(np.where(mine, end, -np.inf))
        before = np.concatenate(([-np.inf], reach[:-1]))  # the stream's latest end before each kernel
        holder = np.maximum.accumulate(np.where(mine & (end > before), positions, -1))
        held_before = np.concatenate(([-1], holder[:-1]))  # the kernel that set it
        runs_past = ~mine & (before - start > OVERLAP_SLACK_US)
        flags[runs_past] = True
        flags[held_before[runs_past]] = True
    return flags.tolist()


def _overlapped_loop(order: list[int], starts, ends, streams) -> list[bool]:
    """_overlapped as one sweep in start order (a fork's few kernels)."""
    flags = [False] * len(order)
    # latest end seen so far per stream, swept in start order
    until_of: dict[int, float] = {}  # per stream, its latest end so far
    last_of: dict[int, int] = {}  # per stream, the sweep position of the kernel that ends then
    slack = OVERLAP_SLACK_US
    latest = float("-inf")  # the latest end of all streams: a kernel starting after it overlaps none
    for p, i in enumerate(order):
        stream_i, start_i, end_i = streams[i], starts[i], ends[i]
        if latest - start_i > slack:
            for stream, until in until_of.items():
                if stream != stream_i and until - start_i > slack:
                    flags[p] = flags[last_of[stream]] = True
        until = until_of.get(stream_i)
        if until is None or end_i > until:
            until_of[stream_i] = end_i
            last_of[stream_i] = p
        if end_i > latest:
            latest = end_i
    return flags
