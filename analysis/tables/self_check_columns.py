"""A rank's self-check part (self_check_parts.RankChecks) read from its columns instead of KernelRows.

Why: the checks read every row of every step four times (sequences, sums, attention cores,
durations); on a large decode trace that was the largest table after the kernel table, and the
columns the attribution writes (analysis/attribution/kernel_columns.py) would have to be made into
KernelRows again for it. Here the sums are `numpy.bincount`s (added in row order from 0.0, as the
loops add them), the per-layer class sequences are read once per distinct chain shape, and a
step's KernelRows are made only where a check has something to say about it (a layer far above
its kind, a step with nothing after its layers, a bad duration, a far gap, an outlier's
difference): those reuse self_check_parts' own functions, so every message reads the same.
A rank whose times are not all finite, or whose durations are not all >= 0, is read from rows.
"""
from __future__ import annotations

import functools
from collections import defaultdict

from analysis.attribution.kernel_columns import LABELS, KernelColumns
from analysis.attribution.rows import SECTION_LAYER, UNATTRIBUTED, StepRow
from analysis.attribution.stages import EXTEND
from analysis.ingest.kernel_classes import class_of_name, class_test
from analysis.numeric import np, sequential_sum
from analysis.tables.column_cells import step_bounds
from analysis.tables.self_check_parts import (
    _ATTENTION_CORE, _COMMUNICATION, _MOE_GROUPS, _MOE_MODULES, _NOT_ROUTED, _SHARED, RankChecks, _after_layers,
    _far_gap, _far_gap_said, _layer_time, _on_chain, _trimmed, bad_duration, judge_sequences, rank_checks, read_part,
    rows_by_step,
    without_repeats,
)

_SECTION, _GROUP, _MODULE = (LABELS.index(f) for f in ("section", "group", "module"))


class _Rows:
    """A rank's columns as the checks read them: what each slot and each name says (small tables,
    looked up per step, so nothing per row is held beyond one step) and each step's KernelRows made on
    first ask (by_step's `get`, for the functions shared with the rows)."""

    def __init__(self, columns: KernelColumns, at: dict[int, tuple[int, int]]):
        self.columns, self.at, self._made = columns, at, {}
        slots = columns.slots

        def per_slot(test) -> np.ndarray:
            return np.asarray([bool(test(s)) for s in slots], dtype=bool)

        self.in_layer = per_slot(lambda s: s[_SECTION] == SECTION_LAYER)
        self.unattributed = per_slot(lambda s: s[_GROUP] == UNATTRIBUTED)
        self.waiting = per_slot(lambda s: s[_SECTION] != SECTION_LAYER and s[_GROUP] == _COMMUNICATION)
        self.other = per_slot(lambda s: s[_SECTION] == SECTION_LAYER and s[_GROUP] == "other")
        self.shared = per_slot(lambda s: s[_MODULE] == _SHARED)
        self.routed = per_slot(lambda s: s[_SECTION] == SECTION_LAYER and s[_MODULE] != _SHARED
                               and s[_GROUP] == "moe" and s[_MODULE] not in _NOT_ROUTED)
        self.moe = per_slot(lambda s: s[_GROUP] in _MOE_GROUPS or s[_MODULE] in _MOE_MODULES)
        self.compute = per_slot(lambda s: s[_GROUP] != _COMMUNICATION and s[_MODULE] not in _NOT_ROUTED)
        is_core = class_test(frozenset({_ATTENTION_CORE}))
        names = columns.names
        self.core = np.asarray([is_core[n] for n in names], dtype=bool)
        classes: dict[str, int] = {}
        self.class_code = np.asarray([classes.setdefault(class_of_name(n), len(classes)) for n in names], dtype=np.int32)
        self.classes = list(classes)
        self.start, self.busy, self.layer, self.micro_batch = (columns.start_us, columns.busy_us, columns.layer,
                                                               columns.micro_batch)

    def span(self, s: StepRow) -> tuple[int, int] | None:
        return self.at.get(s.step) if s.rank == self.columns.rank else None

    def slots(self, first: int, end: int) -> np.ndarray:
        return self.columns.slot[first:end]

    def names(self, first: int, end: int) -> np.ndarray:
        return self.columns.name[first:end]

    def get(self, key: tuple[str, int], default=None):
        rank, step = key
        if rank != self.columns.rank or step not in self.at:
            return default
        if step not in self._made:
            self._made[step] = self.columns.rows(*self.at[step])
        return self._made[step]


def rank_checks_of_columns(rank: str, steps: list[StepRow], columns: KernelColumns, stage: str, strict: bool,
                           chains: dict[tuple[str, int], list[int]], limits: dict) -> RankChecks:
    """self_check_parts.rank_checks of the columns' rows: the same part."""
    bounds = step_bounds(columns.step)
    finite = bool(np.isfinite(columns.start_us).all() and np.isfinite(columns.busy_us).all()
                  and (columns.busy_us >= 0.0).all())
    if bounds is None or not finite:
        return rank_checks(rank, steps, rows_by_step(columns.rows()), stage, strict, chains, limits)
    rows = _Rows(columns, {int(columns.step[first]): (first, end) for first, end in bounds})
    return read_part(rank, steps, rows, stage, strict, chains, limits,
                     (_layer_sequence, _used_steps, _attention_cores, _durations))


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (np.unique without its options imports numpy.ma and costs more per
    call: a step's few layers are asked for three times a step)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


# ---------------------------------------------------------------- layer_kernel_sequence


@functools.lru_cache(maxsize=4096)
def _sequence_of(codes: tuple[int, ...], classes: tuple[str, ...], ignore: frozenset[str]) -> tuple[str, ...]:
    return without_repeats(tuple(c for c in map(classes.__getitem__, codes) if c not in ignore))


def _layer_sequence(part: RankChecks, steps: list[StepRow], rows: _Rows, limits: dict,
                    chains: dict[tuple[str, int], list[int]]) -> None:
    """self_check_parts._layer_sequence: each step's layers' class sequences, read once per chain shape."""
    ignore = frozenset(limits.get("ignore_classes") or ())
    classes = tuple(rows.classes)
    seen: dict = defaultdict(lambda: defaultdict(list))
    shapes: dict[tuple, list[tuple[int, str, tuple[str, ...]]]] = {}
    chain_of: dict[int, np.ndarray] = {}
    for s in steps:
        span = rows.span(s)
        if span is None:
            continue
        first, end = span
        on = _on_chain_mask(s, rows, chains, first, end)
        chain_of[s.step] = on
        slot = rows.slots(first, end)
        in_layer = rows.in_layer[slot]
        layers_all = rows.layer[first:end][in_layer]
        present = _distinct(layers_all)
        moe = _distinct(layers_all[rows.moe[slot][in_layer]])
        at = np.flatnonzero(on & in_layer)
        at = at[np.lexsort((rows.start[first:end][at], rows.layer[first:end][at]))]  # by layer, then start: stable
        layer = rows.layer[first:end][at]
        micro_batch = rows.micro_batch[first:end][at]
        code = rows.class_code[rows.names(first, end)[at]]
        shared = rows.shared[slot[at]]
        key = (present.tobytes(), moe.tobytes(), layer.tobytes(), micro_batch.tobytes(), code.tobytes(), shared.tobytes())
        layers = shapes.get(key)
        if layers is None:
            layers = shapes[key] = _layers_of(present, moe, layer, micro_batch, code, shared, classes, ignore)
        previous = "none"
        own = s.step if s.stage == EXTEND else None  # as self_check_parts._layer_sequence says why
        for number, kind, seq in layers:
            seen[(kind, previous, own)][seq].append((s.step, number))
            previous = kind

    def rows_of(step: int, layer: int) -> list:
        step_rows = rows.get((rows.columns.rank, step), [])
        on = chain_of[step]
        return [r for i, r in enumerate(step_rows) if on[i] and r.section == SECTION_LAYER and r.layer == layer]
    judge_sequences(part, seen, rows_of)


def _on_chain_mask(s: StepRow, rows: _Rows, chains: dict, first: int, end: int) -> np.ndarray:
    """Which of the step's rows lie on its chain across streams (the attribution's, else read again)."""
    known = chains.get((s.rank, s.step))
    on = np.zeros(end - first, dtype=bool)
    if known is not None:
        positions = np.asarray(known, dtype=np.int64)
    else:
        positions = np.asarray(sorted(_on_chain(rows.get((s.rank, s.step), []))), dtype=np.int64)
    on[positions[(positions >= 0) & (positions < end - first)]] = True
    return on


def _layers_of(present, moe, layer, micro_batch, code, shared, classes: tuple[str, ...],
               ignore: frozenset[str]) -> list[tuple[int, str, tuple[str, ...]]]:
    """(layer, kind, class sequence) of each layer that has rows, by layer (self_check_parts._layer_classes
    of its chain rows: `layer`... `shared` are theirs, sorted by layer and start)."""
    out = []
    moe_layers = set(moe.tolist())
    bounds = np.searchsorted(layer, present, side="left").tolist(), np.searchsorted(layer, present, side="right").tolist()
    for number, lo, hi in zip(present.tolist(), *bounds):
        own = slice(lo, hi)
        kept = ~shared[own]
        if not micro_batch[own].any():
            seq = _trimmed(_sequence_of(tuple(code[own][kept].tolist()), classes, ignore))
        else:
            seq = tuple(c for mb in (0, 1) for c in _trimmed(
                _sequence_of(tuple(code[own][kept & (micro_batch[own] == mb)].tolist()), classes, ignore)))
        out.append((number, "MoE" if number in moe_layers else "dense", seq))
    return out


# ---------------------------------------------------------------- the used steps' sums, layer_time, after_layers


def _used_steps(part: RankChecks, used: list[StepRow], rows: _Rows, time_limits: dict | None) -> None:
    """self_check_parts._used_steps: the same sums, added in the same order (row after row, step after step)."""
    busy_us = in_layers_us = other_us = unattributed_us = waiting_us = 0.0
    empty: list[StepRow] = []
    for place, s in enumerate(used):
        span = rows.span(s)
        routed = shared = 0.0
        after_layers = False
        layer_us: dict[str, list[tuple[int, float]]] = defaultdict(list)
        if span is not None:
            first, end = span
            slot, busy = rows.slots(first, end), rows.busy[first:end]
            busy_us = sequential_sum(busy, busy_us)
            in_layers_us = sequential_sum(busy[rows.in_layer[slot]], in_layers_us)
            other_us = sequential_sum(busy[rows.other[slot]], other_us)
            unattributed_us = sequential_sum(busy[rows.unattributed[slot]], unattributed_us)
            waiting_us = sequential_sum(busy[rows.waiting[slot]], waiting_us)
            routed = sequential_sum(busy[rows.routed[slot]])
            shared = sequential_sum(busy[rows.in_layer[slot] & rows.shared[slot]])
            if time_limits is not None:
                layer_us, after_layers = _layer_sums(rows, first, end)
        part.routed_us += routed
        part.shared_us += shared
        if shared:
            part.routed_to_shared.append(routed / shared)
        if time_limits is not None:
            _layer_time(part, s, place, layer_us, rows, time_limits)
            if not after_layers:
                empty.append(s)
    part.busy_us, part.in_layers_us, part.other_us = busy_us, in_layers_us, other_us
    part.unattributed_us, part.waiting_us = unattributed_us, waiting_us
    if time_limits is not None:
        _after_layers(part, empty, rows)


def _layer_sums(rows: _Rows, first: int, end: int) -> tuple[dict[str, list[tuple[int, float]]], bool]:
    """A step's compute per layer by kind (layers in order, kinds as they first come) and whether a kernel
    outside the layers starts at or after its first layer kernel."""
    slot = rows.slots(first, end)
    in_layer = rows.in_layer[slot]
    start = rows.start[first:end]
    layer = rows.layer[first:end][in_layer]
    by_kind: dict[str, list[tuple[int, float]]] = defaultdict(list)
    if not len(layer):
        return by_kind, False  # no layer kernel: nothing starts at or after an infinite first layer start
    layer_slot = slot[in_layer]
    compute = rows.compute[layer_slot]
    present = _distinct(layer)
    index = np.searchsorted(present, layer)
    sums = np.bincount(index[compute], weights=rows.busy[first:end][in_layer][compute], minlength=len(present))
    moe = np.bincount(index, weights=rows.moe[layer_slot], minlength=len(present)) > 0
    for number, us, is_moe in zip(present.tolist(), sums.tolist(), moe.tolist()):
        by_kind["MoE" if is_moe else "dense"].append((number, us))
    first_layer_start = start[in_layer].min()
    return by_kind, bool((start[~in_layer] >= first_layer_start).any())


# ---------------------------------------------------------------- the other per-rank checks


def _attention_cores(part: RankChecks, steps: list[StepRow], rows: _Rows) -> None:
    for s in steps:
        span = rows.span(s)
        if span is None:
            continue
        first, end = span
        core = rows.core[rows.names(first, end)]
        cores = int(np.count_nonzero(core))
        if not cores:
            continue
        part.cores += cores
        outside = core & ~rows.in_layer[rows.slots(first, end)]
        count = int(np.count_nonzero(outside))
        if count:
            if not part.cores_outside:
                r = rows.get((s.rank, s.step))[int(np.argmax(outside))]
                part.first_core_outside = f"first: {s.rank} step {s.step}, {r.section} section, {r.kernel_name[:80]}"
            part.cores_outside += count


class _Named:
    """What _far_gap_said reads of the kernel after the gap."""

    __slots__ = ("kernel_name",)

    def __init__(self, kernel_name: str):
        self.kernel_name = kernel_name


def _durations(part: RankChecks, steps: list[StepRow], rows: _Rows, limits: dict) -> None:
    """self_check_parts._durations: every duration here is finite and >= 0 and every start finite, so
    a kernel is only looked at where it ends after the next step starts (plus the slack)."""
    slack = float(limits["slack_us"])
    far_us, far_ratio = float(limits["far_gap_s"]) * 1e6, float(limits["far_gap_ratio"])
    bad: list[str] = []
    rank = part.rank
    steps = sorted(steps, key=lambda s: s.start_us)
    names = rows.columns.names
    for s, nxt in zip(steps, [*steps[1:], None]):
        span = rows.span(s)
        if span is None:
            continue
        first, end = span
        part.duration_kernels += end - first
        start, busy = rows.start[first:end], rows.busy[first:end]
        ends = start + busy
        if nxt is not None:
            late = np.flatnonzero(ends > nxt.start_us + slack)
            if len(late):
                step_rows = rows.get((s.rank, s.step))
                bad.extend(said for i in late.tolist() if (said := bad_duration(rank, s, nxt, step_rows[i], slack)))
        gap = ""
        if end - first >= 2:
            if (start[1:] >= start[:-1]).all():
                reach = np.maximum.accumulate(ends)
                gaps = start[1:] - reach[:-1]
                widest_at = int(np.argmax(gaps))
                widest = float(gaps[widest_at])
                after = None
                if widest > 0.0:
                    after = _Named(names[int(rows.columns.name[first + 1 + widest_at])])
                else:
                    widest = 0.0
                gap = _far_gap_said(widest, after, (float(reach[-1]) - float(start[0])) - widest, far_us, far_ratio)
            else:
                gap = _far_gap(rows.get((s.rank, s.step)), far_us, far_ratio)
        if gap:
            bad.append(f"{rank} step {s.step}: {gap}")
    part.bad_durations = len(bad)
    part.first_bad_durations = bad[:3]

