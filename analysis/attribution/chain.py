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
    from analysis.numeric import np

    if all(map(operator.lt, starts, itertools.islice(starts, 1, None))):  # a step's kernels: already in order
        order = list(range(len(starts)))
    else:  # by (start, end), ties in input order: two stable sorts on one key each (cheaper than on pairs)
        order = sorted(range(len(starts)), key=ends.__getitem__)
        order.sort(key=starts.__getitem__)
    rows = None
    if len(order) >= ARRAY_SWEEP_FROM:  # the step as one row of arrays, for the sweeps long enough
        if arrays is None:
            arrays = (np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64),
                      np.asarray(streams, dtype=np.int64))
        rows = (arrays[0][None, :], arrays[1][None, :], arrays[2])
    ((_row, chain),) = _chains(order, rows, streams, anchors, None, np.zeros(1, dtype=np.intp), (starts, ends))
    return _without_side_trips(chain, streams, anchors)


def main_chains_of(starts, ends, streams: Sequence[int], anchors: Sequence[bool] | None) -> list[list[int]]:
    """main_chain of each row of `starts` and `ends` (float64, steps x kernels), read together: steps of
    one shape (a graph replayed step after step: the same streams and anchors at every position) whose
    starts rise along each row. Why: per step, the chain is a few dozen numpy calls and a walk over the
    forks, the same for every replay; here each sweep is one pass over all the rows, rows whose overlaps
    and choices agree are walked once, and each distinct chain loses its side trips once."""
    from analysis.numeric import np

    trimmed: dict[tuple[int, ...], list[int]] = {}
    out: list[list[int]] = [[] for _ in range(len(starts))]
    arrays = (starts, ends, np.asarray(streams, dtype=np.int64))
    for rows, chain in _chains(list(range(starts.shape[1])), arrays, streams, anchors, None, np.arange(len(starts))):
        key = tuple(chain)
        kept = trimmed.get(key)
        if kept is None:
            kept = trimmed[key] = _without_side_trips(chain, streams, anchors)
        for r in rows.tolist():
            out[r] = list(kept)
    return out


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


def _chains(order: list[int], arrays: tuple | None, streams, anchors, after_all: int | None, rows,
            lists: tuple | None = None) -> list[tuple[object, list[int]]]:
    """The chain of the kernels `order` (positions, in start order) in each row of `rows`, as (rows,
    chain) pairs, the rows that share a chain together: the run of kernels that nothing overlaps is the
    chain's; then a fork: the run of overlapping kernels, and the stream that carries on after it.
    `arrays`: the starts and ends (rows x positions) and the streams (per position) as arrays; `lists`:
    one row's starts and ends as lists (main_chain), for a sweep too short for arrays."""
    if lists is not None and (arrays is None or len(order) < ARRAY_SWEEP_FROM):
        return _walk(order, _overlapped_loop(order, lists[0], lists[1], streams), arrays, streams, anchors,
                     after_all, rows, lists)
    from analysis.numeric import np

    start, end, stream = arrays
    if len(rows) < len(start):  # some of the rows (as many: all of them, in order)
        start, end = start[rows], end[rows]
    if len(order) < start.shape[1] or order[-1] != len(order) - 1 or order != list(range(len(order))):
        start, end, stream = start[:, order], end[:, order], stream[order]  # the sweep's kernels, in its order
    flags = _overlapped_rows(start, end, stream)
    if len(rows) == 1:
        return _walk(order, flags[0].tolist(), arrays, streams, anchors, after_all, rows, lists)
    same: dict[bytes, list[int]] = {}
    for i, key in enumerate(map(bytes, np.packbits(flags, axis=1))):
        same.setdefault(key, []).append(i)
    return [pair for members in same.values()
            for pair in _walk(order, flags[members[0]].tolist(), arrays, streams, anchors, after_all, rows[members])]


def _walk(order: list[int], overlapped: list[bool], arrays, streams, anchors, after_all: int | None, rows,
          lists: tuple | None = None) -> list[tuple[object, list[int]]]:
    """_chains' walk for rows whose kernels `order` overlap alike (`overlapped`): where a fork's choice
    reads the rows' times (its anchored streams swept again, its busiest stream), the rows part by what
    they choose."""
    branches = [(rows, [])]
    pos, n = 0, len(order)
    while pos < n:
        fork = _index_of(overlapped, True, pos, n)  # list.index: a scan in C
        for _rows, chain in branches:
            chain.extend(order[pos:fork])
        if fork == n:
            break
        end = _index_of(overlapped, False, fork, n)
        group = order[fork:end]
        after = order[end] if end < n else after_all
        pos = end
        anchored = _anchored_streams(group, streams, anchors)
        in_group = {streams[j] for j in group}
        if anchored and len(anchored) < len(in_group):
            # streams without a kernel of the layers' own line are side work (a shared expert, or a
            # kernel that runs beside many layers): the chain is read again without them
            inner = [j for j in group if streams[j] in anchored]
            branches = _grown(branches, lambda rows_b: _chains(inner, arrays, streams, anchors, after, rows_b, lists))
            continue
        keep = _most_anchored(anchored)
        if keep is None and after is not None:
            keep = streams[after]
        if keep is None or keep not in in_group:  # the stream with the most busy time in it
            branches = _grown(branches, lambda rows_b: [(part, [j for j in group if streams[j] == busiest])
                                                        for part, busiest in _busiest_streams(group, arrays, streams, rows_b, lists)])
        else:
            picked = [j for j in group if streams[j] == keep]
            for _rows, chain in branches:
                chain.extend(picked)
    return branches


def _grown(branches: list, more_of) -> list:
    """Each branch (rows, chain) carried on by what `more_of(rows)` gives its rows ((rows, more) pairs):
    a branch whose rows all take one way grows in place; one that parts is copied per part."""
    grown = []
    for rows, chain in branches:
        found = more_of(rows)
        if len(found) == 1:
            chain.extend(found[0][1])
            grown.append((found[0][0], chain))
        else:
            grown.extend((part, chain + more) for part, more in found)
    return grown


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


def _busiest_streams(group: list[int], arrays, streams, rows, lists: tuple | None) -> list[tuple[object, int]]:
    """Per row, the stream with the most busy time in a fork (the lower stream on a tie), as (rows,
    stream) pairs. Each stream's time is summed as (so far + end) - start, kernel after kernel."""
    from analysis.numeric import np

    if lists is not None:  # one row, its times as lists
        starts, ends = lists
        busy: dict = {}
        for j in group:
            busy[streams[j]] = busy.get(streams[j], 0.0) + ends[j] - starts[j]
        return [(rows, max(busy, key=lambda s: (busy[s], -s)))]
    starts, ends = arrays[0], arrays[1]
    busy = {}
    for j in group:
        busy[streams[j]] = busy.get(streams[j], 0.0) + ends[rows, j] - starts[rows, j]
    order = list(busy)
    best_busy, best = busy[order[0]], np.full(len(rows), order[0], dtype=np.int64)
    for s in order[1:]:  # max by (busy, -stream) as tuples compare: busy first, the stream where equal
        wins = (busy[s] > best_busy) | ((busy[s] == best_busy) & (-s > -best))
        best_busy, best = np.where(wins, busy[s], best_busy), np.where(wins, s, best)
    return [(rows[best == s], s) for s in sorted(set(best.tolist()))]


ARRAY_SWEEP_FROM = 128  # kernels in a sweep from which array passes beat the loop (a step's whole chain)


def _overlapped_rows(start, end, stream):
    """_overlapped_loop's flags of every row at once (rows x kernels in the sweep's order; `stream`: the
    stream of each column), from array passes, stream by stream: the latest end of the stream's kernels
    before each kernel in the sweep (a running maximum), and the kernel that first reached it; a kernel
    of another stream that it runs past by more than the slack flags both. Only comparisons and one
    subtraction a pair, as in the loop, so the flags are the loop's."""
    from analysis.numeric import np

    m, n = start.shape
    flags = np.zeros((m, n), dtype=bool)
    positions = np.arange(n)
    no_end, no_kernel = np.full((m, 1), -np.inf), np.full((m, 1), -1)
    for own in set(stream.tolist()):  # not np.unique: it imports numpy.ma
        mine = stream == own
        reach = np.maximum.accumulate(np.where(mine, end, -np.inf), axis=1)
        before = np.concatenate((no_end, reach[:, :-1]), axis=1)  # the stream's latest end before each kernel
        runs_past = ~mine & (before - start > OVERLAP_SLACK_US)
        if runs_past.any():
            holder = np.maximum.accumulate(np.where(mine & (end > before), positions, -1), axis=1)
            held_before = np.concatenate((no_kernel, holder[:, :-1]), axis=1)  # the kernel that set it
            flags |= runs_past
            row, col = np.nonzero(runs_past)
            flags[row, held_before[row, col]] = True
    return flags


def _overlapped_loop(order: list[int], starts, ends, streams) -> list[bool]:
    """Per kernel of the sweep `order` (in its order): does a kernel of another stream run past its
    start? One pass in start order (a fork's few kernels; _overlapped_rows gives the same flags)."""
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
