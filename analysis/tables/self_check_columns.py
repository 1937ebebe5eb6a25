"""A rank's self-check part (self_check_parts.RankChecks) read from its columns.

Why: the checks read every row of every step four times (sequences, sums, attention cores,
durations); from the columns the attribution writes (analysis/attribution/kernel_columns.py) the sums
are `numpy.bincount`s (added in row order from 0.0, as a loop adds them), the per-layer class sequences
are read once per distinct chain shape, and a step's KernelRows are made only where a check has
something to say about it (a layer far above its kind, a step with nothing after its layers, a bad
duration, a far gap, an outlier's difference): those use self_check_parts' functions, so every
message reads the same. Rows from elsewhere (a saved table, a rank no worker reduced) are read as
columns too (rank_checks_of_rows): one reading. Times that are not numbers or not >= 0 (no loader
makes them; a table read back may hold them) are read as a loop over the rows would read them.
tests/self_check_rows.py holds that loop, the truth these are held to.
"""
from __future__ import annotations

import functools
from collections import defaultdict

from analysis.attribution.kernel_columns import LABELS, KernelColumns
from analysis.attribution.rows import SECTION_LAYER, UNATTRIBUTED, KernelRow, StepRow, usable_statuses
from analysis.attribution.stages import EXTEND, UNKNOWN
from analysis.ingest.kernel_classes import class_of_name, class_test
from analysis.numeric import np, sequential_sum
from analysis.tables.column_cells import step_bounds
from analysis.tables.self_check_parts import (
    _ATTENTION_CORE, _COMMUNICATION, _MOE_GROUPS, _MOE_MODULES, _NOT_ROUTED, _SHARED, RankChecks, _after_layers,
    _far_gap, _far_gap_said, _layer_time, _on_chain, _trimmed, bad_duration, judge_sequences,
    without_repeats,
)

_SECTION, _GROUP, _MODULE = (LABELS.index(f) for f in ("section", "group", "module"))
_INF = float("inf")


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
        # every time a number, every duration >= 0 (what a loader makes): no step needs the odd cases' care
        self.plain = bool(np.isfinite(self.start).all() and np.isfinite(self.busy).all() and (self.busy >= 0.0).all())

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


def rank_checks_of_rows(rank: str, steps: list[StepRow], kernel_rows: list[KernelRow], stage: str, strict: bool,
                        chains: dict[tuple[str, int], list[int]], limits: dict) -> RankChecks:
    """The part of one rank from its KernelRows (`steps`: its StepRows, every stage, in order)."""
    return rank_checks_of_columns(rank, steps, KernelColumns.of_rows(kernel_rows), stage, strict, chains, limits)


def rank_checks_of_columns(rank: str, steps: list[StepRow], columns: KernelColumns, stage: str, strict: bool,
                           chains: dict[tuple[str, int], list[int]], limits: dict) -> RankChecks:
    """The part of one rank from its columns (`steps`: its StepRows, every stage, in order)."""
    bounds = step_bounds(columns.step)
    if bounds is None:  # a step's rows apart (rows from elsewhere): each step's rows together, in their order
        columns = columns.taken(np.argsort(columns.step, kind="stable"))
        bounds = step_bounds(columns.step)
    rows = _Rows(columns, {int(columns.step[first]): (first, end) for first, end in bounds})
    part = RankChecks(rank, stage, strict)
    table_steps = [s for s in steps if s.stage == stage]
    used = [s for s in table_steps if s.status in usable_statuses(strict)]
    part.used_steps = len(used)
    if stage != UNKNOWN:
        _layer_sequence(part, table_steps, rows, limits["layer_sequence"], chains)
    _used_steps(part, used, rows, limits["layer_time"] if stage != UNKNOWN else None)
    _attention_cores(part, steps, rows)
    _durations(part, steps, rows, limits["durations"])
    return part


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
    """Layers of one kind carry the same sequence of kernel classes: each step's layers' sequences (read
    once per chain shape) and those that differ from their kind's usual one (judge_sequences). A layer
    compares with layers of its kind after the same kind (after a MoE layer the tokens are gathered from
    the expert-parallel ranks first), and an extend step's with the same step's only (with a chunk whose
    earlier part is cached, SGLang's MLA runs the absorbed path, with fresh prompts the plain one)."""
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
        start, layer, micro_batch = rows.start[first:end], rows.layer[first:end], rows.micro_batch[first:end]
        if not rows.plain and np.isnan(start[at]).any():
            at = _in_python_order(at, start.tolist(), layer, micro_batch)
        else:
            at = at[np.lexsort((start[at], layer[at]))]  # by layer, then start: stable
        layer = layer[at]
        micro_batch = micro_batch[at]
        code = rows.class_code[rows.names(first, end)[at]]
        shared = rows.shared[slot[at]]
        key = (present.tobytes(), moe.tobytes(), layer.tobytes(), micro_batch.tobytes(), code.tobytes(), shared.tobytes())
        layers = shapes.get(key)
        if layers is None:
            layers = shapes[key] = _layers_of(present, moe, layer, micro_batch, code, shared, classes, ignore)
        previous = "none"
        own = s.step if s.stage == EXTEND else None
        for number, kind, seq in layers:
            seen[(kind, previous, own)][seq].append((s.step, number))
            previous = kind

    def rows_of(step: int, layer: int) -> list:
        step_rows = rows.get((rows.columns.rank, step), [])
        on = chain_of[step]
        return [r for i, r in enumerate(step_rows) if on[i] and r.section == SECTION_LAYER and r.layer == layer]
    judge_sequences(part, seen, rows_of)


def _in_python_order(at: np.ndarray, start: list[float], layer: np.ndarray, micro_batch: np.ndarray) -> np.ndarray:
    """`at` by layer, then each layer's rows (each micro-batch's apart, where the layer has two) by
    start as Python's sort orders them: a start that is not a number compares false both ways, and
    a loop over the rows sorts them so."""
    two = set(layer[at][micro_batch[at] != 0].tolist())
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, number, mb in zip(at.tolist(), layer[at].tolist(), micro_batch[at].tolist()):
        groups[(number, mb if number in two else 0)].append(i)
    return np.asarray([i for key in sorted(groups) for i in sorted(groups[key], key=start.__getitem__)],
                      dtype=np.int64)


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
    """(layer, kind, class sequence) of each layer that has rows, by layer (`layer`... `shared`: its chain
    rows', sorted by layer and start): the classes without repeats and the collectives a layer ends with,
    shared experts left out (where they fall beside the routed experts is a matter of timing); under
    two-batch overlap micro-batch 0's, then 1's, as one micro-batch alone would run them."""
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
    """The checks that read each used step's rows: layer_time and after_layers (where the stage is known:
    time_limits given), expert sizes and step time shares; each sum added row after row, step after step."""
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
            _layer_time(part, s, place, layer_us, rows, time_limits)  # None: judged from the mixes
            if not after_layers:
                empty.append(s)
    part.busy_us, part.in_layers_us, part.other_us = busy_us, in_layers_us, other_us
    part.unattributed_us, part.waiting_us = unattributed_us, waiting_us
    if time_limits is not None:
        _after_layers(part, empty, rows)


def _layer_sums(rows: _Rows, first: int, end: int) -> tuple[dict[str, list[tuple[int, float]]] | None, bool]:
    """A step's compute per layer by kind (layers in order, kinds as they first come; None where a layer
    kernel's time is not a number >= 0: _layer_time says why) and whether a kernel outside the layers
    starts at or after its first layer kernel."""
    slot = rows.slots(first, end)
    in_layer = rows.in_layer[slot]
    start = rows.start[first:end]
    layer = rows.layer[first:end][in_layer]
    by_kind: dict[str, list[tuple[int, float]]] = defaultdict(list)
    if not len(layer):  # nothing starts at or after an infinite first layer start
        return by_kind, bool((start >= _INF).any())
    layer_slot = slot[in_layer]
    compute = rows.compute[layer_slot]
    present = _distinct(layer)
    index = np.searchsorted(present, layer)
    sums = np.bincount(index[compute], weights=rows.busy[first:end][in_layer][compute], minlength=len(present))
    moe = np.bincount(index, weights=rows.moe[layer_slot], minlength=len(present)) > 0
    for number, us, is_moe in zip(present.tolist(), sums.tolist(), moe.tolist()):
        by_kind["MoE" if is_moe else "dense"].append((number, us))
    layer_starts = start[in_layer]
    # the first layer kernel's start as min() finds it: a start that is not a number, first, stays
    if rows.plain:
        first_layer_start, unsigned = layer_starts.min(), True
    else:
        first_layer_start = layer_starts[0] if np.isnan(layer_starts[0]) else np.nanmin(layer_starts)
        unsigned = bool((rows.busy[first:end][in_layer] >= 0.0).all())
    return by_kind if unsigned else None, bool((start[~in_layer] >= first_layer_start).any())


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
    """Kernel durations present, finite, not negative, inside their step and near the rest of it: a
    kernel is looked at (bad_duration) only where one of those may not hold."""
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
        limit = nxt.start_us + slack if nxt is not None else _INF
        if rows.plain:
            doubtful = np.flatnonzero(ends > limit)
        else:
            doubtful = np.flatnonzero(~((busy >= 0.0) & (busy < _INF) & (np.abs(start) < _INF) & (ends <= limit)))
        if len(doubtful):
            step_rows = rows.get((s.rank, s.step))
            bad.extend(said for i in doubtful.tolist() if (said := bad_duration(rank, s, nxt, step_rows[i], slack)))
        gap = ""
        if end - first >= 2:
            if (rows.plain or np.isfinite(ends).all()) and (start[1:] >= start[:-1]).all():
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

