"""Communication kernels split into wait (for the last peer) and transfer, per collective and rank.

Why: a collective's duration on one rank mixes waiting for the slowest peer with moving data; a
DeepEP low-latency dispatch busy-waits, so a rank that arrives early shows a long dispatch that
says nothing about the network. The split needs every rank's copy of the same collective.

How: the communication kernels of a step (kernel classes dispatch / combine / a2a / allreduce:
DeepEP, NCCL, all-to-all, all-reduce) are matched across ranks by (step, stage, micro-batch, layer,
module, occurrence), the occurrence being the kernel's index among that rank's communication
kernels of the same module in that layer, in start order (so DeepEP's low-latency send / recv
halves, two launches of one module, are matched half with half). Rank clocks need not agree: a
collective ends at about the same true time on every rank, so each rank's clock is shifted, per
step, by the median over the step's collectives of (its end - the reference rank's end). On that
common clock the last rank to start is the one the others waited for; a rank's transfer is the
time from that last start to its own end, its wait the rest of its duration (0 for the last rank).
A constant clock offset between ranks, however large, does not change the split.
"""
from __future__ import annotations

import operator
import statistics
from collections import defaultdict
from dataclasses import dataclass

import msgspec

from analysis.ingest.kernel_classes import COMMUNICATION, class_test
from analysis.attribution.rows import KernelRow, StepRow


class CommRow(msgspec.Struct):
    """One rank's copy of one collective. wait_us / transfer_us / last_rank are None where the
    collective could not be matched on every rank (or there is a single rank)."""

    step: int
    layer: int
    module: str
    rank: str
    busy_us: float
    wait_us: float | None
    transfer_us: float | None
    last_rank: str | None
    stage: str
    micro_batch: int
    group: str
    occurrence: int
    kernel: str
    start_us: float  # on the rank's own clock, as in kernels_long.csv
    clock_offset_us: float | None  # what was subtracted from this rank's times to align it (reference rank: 0)
    end_skew_us: float | None  # spread of the aligned ends over the ranks: how well the alignment holds
    preceding_module: str  # what this rank ran just before: the module of its last kernel before this one outside it
    preceding_layer: int
    idle_before_us: float  # gap on this rank between its previous kernel's end and this kernel's start (host-side delay)


class CommLayer(msgspec.Struct):
    """One layer's collective of one module: per step, mean over the used steps and ranks."""

    layer: int
    module: str
    busy_us: float
    wait_us: float
    transfer_us: float
    last_rank: str  # the rank that arrived last most often


class Straggler(msgspec.Struct):
    """The rank the others waited for at one layer's collective, over the steps."""

    layer: int
    module: str
    rank: str  # the rank that arrived last most often
    last_share_pct: float  # in what share of the matched collectives (over steps, occurrences) it was last
    others_wait_us: float  # mean wait of the other ranks per collective
    preceding_module: str  # what the last rank ran just before the collective (most frequent)
    preceding_layer: int
    idle_before_us: float  # mean GPU-idle gap on the last rank just before the collective (launch / host delay)
    collectives: int


def _preceding(rows: list[KernelRow], index: int) -> tuple[str, int]:
    """The module (and layer) of the nearest earlier kernel of the same step outside the
    collective's own module: what held the rank up when it arrives last."""
    target = rows[index]
    for j in range(index - 1, -1, -1):
        prev = rows[j]
        if prev.step != target.step:
            break
        if (prev.layer, prev.group, prev.module) != (target.layer, target.group, target.module):
            return prev.module, prev.layer
    return "", -1


_BY_STEP = operator.attrgetter("step")
_BY_START = operator.attrgetter("start_us")


@dataclass
class RankCollectives:
    """One rank's collectives before the split: its CommRows with wait / transfer not yet known, and
    the section of its rows outside the layers at each collective's (step, start) there (fill_waits
    places such a collective's wait by it). Made from one rank's rows alone, so a rank's worker
    makes it beside the others (analysis/pipeline/rank_digest.py) and the split only matches them."""

    rows: list[CommRow]
    sections: dict[tuple[int, float], str]


def rank_collectives(rank: str, rows: list[KernelRow]) -> RankCollectives:
    """The rank's communication kernels (its rows, in row order) as unsplit CommRows, each with the
    idle gap before it and what the rank ran just before it."""
    is_comm = class_test(COMMUNICATION)  # per kernel name: this loop is hot
    if not any(is_comm[name] for name in {row.kernel_name for row in rows}):
        return RankCollectives([], {})  # no collective at all (one GPU): no walk over the rows
    # by (step, start), ties in row order: two stable sorts on one key each (cheaper than on pairs)
    ordered = sorted(rows, key=_BY_START)
    ordered.sort(key=_BY_STEP)
    counts: dict[tuple, int] = defaultdict(int)
    found: list[CommRow] = []
    step, busy_until = None, 0.0  # the latest kernel end so far in the step (any stream)
    for i, row in enumerate(ordered):
        start = row.start_us
        if row.step != step:
            step, busy_until = row.step, start
        gap = start - busy_until
        idle = gap if gap > 0.0 else 0.0
        end = start + row.busy_us
        if end > busy_until:
            busy_until = end
        if not is_comm[row.kernel_name]:
            continue
        base = (row.step, row.stage, row.micro_batch, row.layer, row.module)
        occurrence = counts[base]
        counts[base] += 1
        module, layer = _preceding(ordered, i)
        found.append(CommRow(
            step=row.step, layer=row.layer, module=row.module, rank=rank, busy_us=row.busy_us,
            wait_us=None, transfer_us=None, last_rank=None, stage=row.stage, micro_batch=row.micro_batch,
            group=row.group, occurrence=occurrence, kernel=row.kernel, start_us=row.start_us,
            clock_offset_us=None, end_skew_us=None, preceding_module=module, preceding_layer=layer,
            idle_before_us=idle))
    outside = {(c.step, c.start_us) for c in found if c.layer < 0}
    sections: dict[tuple[int, float], str] = {}
    if outside:  # the last row outside the layers at that (step, start), in row order, as fill_waits read it
        for row in rows:
            if row.layer < 0 and (row.step, row.start_us) in outside:
                sections[(row.step, row.start_us)] = row.section
    return RankCollectives(found, sections)


def rank_collectives_of_columns(rank: str, columns) -> RankCollectives:
    """rank_collectives of a rank's columns (analysis/attribution/kernel_columns.py): the same CommRows.
    The rows are walked as arrays; a KernelRow is made for each collective only. Times that are not
    all finite are read from the rows."""
    from analysis.numeric import np

    is_comm = class_test(COMMUNICATION)
    comm_name = np.asarray([is_comm[name] for name in columns.names], dtype=bool)
    if not comm_name.any():
        return RankCollectives([], {})
    start, busy, step = columns.start_us, columns.busy_us, columns.step
    if not (np.isfinite(start).all() and np.isfinite(busy).all() and (busy >= 0.0).all()):
        return rank_collectives(rank, columns.rows())
    order = np.argsort(start, kind="stable")
    order = order[np.argsort(step[order], kind="stable")]  # by (step, start), ties in row order
    ordered_step = step[order]
    ends = (start + busy)[order]
    cuts = [0, *(np.flatnonzero(ordered_step[1:] != ordered_step[:-1]) + 1).tolist(), len(order)]
    reach = np.empty(len(order))  # the latest end so far in the step, each row's own included
    for lo, hi in zip(cuts, cuts[1:]):
        reach[lo:hi] = np.maximum.accumulate(ends[lo:hi])
    first_in_step = np.zeros(len(order), dtype=bool)
    first_in_step[cuts[:-1]] = True
    at = np.flatnonzero(comm_name[columns.name[order]])
    comm = columns.rows_at(order[at])
    ordered_start = start[order]
    gaps = np.where(first_in_step[at], 0.0, ordered_start[at] - reach[np.maximum(at - 1, 0)])
    slot_of = columns.slot[order].tolist()
    layers = columns.layer[order].tolist()
    steps = ordered_step.tolist()
    group_module = {code: (s[1], s[2]) for code, s in enumerate(columns.slots)}
    counts: dict[tuple, int] = defaultdict(int)
    found: list[CommRow] = []
    for i, row, gap in zip(at.tolist(), comm, gaps.tolist()):
        base = (row.step, row.stage, row.micro_batch, row.layer, row.module)
        occurrence = counts[base]
        counts[base] += 1
        module, layer = "", -1  # _preceding's walk on the arrays
        own = (row.layer, row.group, row.module)
        for j in range(i - 1, -1, -1):
            if steps[j] != row.step:
                break
            if (layers[j], *group_module[slot_of[j]]) != own:
                module, layer = group_module[slot_of[j]][1], layers[j]
                break
        found.append(CommRow(
            step=row.step, layer=row.layer, module=row.module, rank=rank, busy_us=row.busy_us,
            wait_us=None, transfer_us=None, last_rank=None, stage=row.stage, micro_batch=row.micro_batch,
            group=row.group, occurrence=occurrence, kernel=row.kernel, start_us=row.start_us,
            clock_offset_us=None, end_skew_us=None, preceding_module=module, preceding_layer=layer,
            idle_before_us=gap if gap > 0.0 else 0.0))
    outside = {(c.step, c.start_us) for c in found if c.layer < 0}
    sections: dict[tuple[int, float], str] = {}
    if outside:  # the last row outside the layers at that (step, start), in row order, as fill_waits read it
        for i in np.flatnonzero(columns.layer < 0).tolist():
            key = (int(step[i]), float(start[i]))
            if key in outside:
                sections[key] = columns.slots[columns.slot[i]][0]
    return RankCollectives(found, sections)


def rows_by_rank(kernel_rows: list[KernelRow]) -> dict[str, list[KernelRow]]:
    """Each rank's rows in row order, ranks in the order of their first row."""
    by_rank: dict[str, list[KernelRow]] = defaultdict(list)
    for row in kernel_rows:
        by_rank[row.rank].append(row)
    return by_rank


def collectives_of(kernel_rows: list[KernelRow]) -> dict[str, RankCollectives]:
    """rank -> its RankCollectives, made here from the rows (what rank workers send otherwise)."""
    return {rank: rank_collectives(rank, rows) for rank, rows in rows_by_rank(kernel_rows).items()}


def split_collectives(kernel_rows: list[KernelRow], step_rows: list[StepRow],
                      parts: dict[str, RankCollectives] | None = None) -> list[CommRow]:
    """Every communication kernel of every rank as a CommRow, split where all ranks have it.
    `parts`: rank -> its RankCollectives (collectives_of the rows, where not given)."""
    if parts is None:
        parts = collectives_of(kernel_rows)
    ranks_of_step: dict[tuple[int, str], set[str]] = defaultdict(set)
    for s in step_rows:
        ranks_of_step[(s.step, s.stage)].add(s.rank)
    out: dict[tuple, dict[str, CommRow]] = defaultdict(dict)
    for rank, part in parts.items():
        for found in part.rows:
            c = msgspec.structs.replace(found)  # the split fills it in: a worker's part stays as it came
            out[(c.step, c.stage, c.micro_batch, c.layer, c.module, c.occurrence)][rank] = c
    matched = {key: copies for key, copies in out.items()
               if len(copies) > 1 and set(copies) == ranks_of_step[(key[0], key[1])]}
    offsets = _clock_offsets(matched)
    for key, copies in matched.items():
        shift = offsets[(key[0], key[1])]
        starts = {r: c.start_us - shift[r] for r, c in copies.items()}
        ends = {r: c.start_us + c.busy_us - shift[r] for r, c in copies.items()}
        last = max(sorted(starts), key=lambda r: starts[r])
        skew = max(ends.values()) - min(ends.values())
        for r, c in copies.items():
            # Differences of nearby times first: trace clocks are ~1e12 us, where float sums lose ns.
            ahead = (copies[last].start_us - c.start_us) - (shift[last] - shift[r]) if r != last else 0.0
            c.wait_us = min(c.busy_us, max(0.0, ahead))
            c.transfer_us = c.busy_us - c.wait_us
            c.last_rank = last
            c.clock_offset_us = shift[r]
            c.end_skew_us = skew
    rows_out = [c for copies in out.values() for c in copies.values()]
    rows_out.sort(key=lambda c: (c.stage, c.step, c.micro_batch, c.layer, c.module, c.occurrence, c.rank))
    return rows_out


def _clock_offsets(matched: dict[tuple, dict[str, CommRow]]) -> dict[tuple[int, str], dict[str, float]]:
    """Per (step, stage): each rank's clock minus the reference rank's, as the median over the
    step's collectives of the difference of their ends (collectives end together on every rank)."""
    diffs: dict[tuple[int, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for key, copies in matched.items():
        ref = min(copies)
        ref_end = copies[ref].start_us + copies[ref].busy_us
        for r, c in copies.items():
            diffs[(key[0], key[1])][r].append(c.start_us + c.busy_us - ref_end)
    return {step: {r: statistics.median(v) for r, v in per_rank.items()} for step, per_rank in diffs.items()}


def stragglers(rows: list[CommRow], stage: str | None = None) -> list[Straggler]:
    """Per (layer, module): the rank that arrived last most often, the wait it cost the others and
    what it ran just before; largest wait first."""
    per: dict[tuple[int, str], list[tuple[str, float, tuple[str, int], float]]] = defaultdict(list)
    by_collective: dict[tuple, list[CommRow]] = defaultdict(list)
    for c in rows:
        if c.last_rank is None or (stage is not None and c.stage != stage):
            continue
        by_collective[(c.step, c.stage, c.micro_batch, c.layer, c.module, c.occurrence)].append(c)
    for (_s, _st, _mb, layer, module, _occ), copies in by_collective.items():
        last = copies[0].last_rank
        others = [c.wait_us for c in copies if c.rank != last]
        last_row = next(c for c in copies if c.rank == last)
        per[(layer, module)].append((last, statistics.fmean(others) if others else 0.0,
                                     (last_row.preceding_module, last_row.preceding_layer), last_row.idle_before_us))
    out: list[Straggler] = []
    for (layer, module), items in per.items():
        ranks = [item[0] for item in items]
        top = max(sorted(set(ranks)), key=ranks.count)
        mine = [item for item in items if item[0] == top]
        before = [item[2] for item in mine]
        common = max(sorted(set(before)), key=before.count)
        out.append(Straggler(layer=layer, module=module, rank=top, last_share_pct=100 * len(mine) / len(items),
                             others_wait_us=statistics.fmean(item[1] for item in items), preceding_module=common[0],
                             preceding_layer=common[1], idle_before_us=statistics.fmean(item[3] for item in mine),
                             collectives=len(items)))
    out.sort(key=lambda s: (-s.others_wait_us, s.layer, s.module))
    return out
