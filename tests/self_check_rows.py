"""A rank's self-check part read from its KernelRows by plain loops: the truth that the analysis's one
reading, from columns (analysis/tables/self_check_columns.py), is held to (tests/test_kernel_columns.py,
tests/test_rank_digest.py, tests/test_self_checks.py).

It shares with that reading only the functions that judge and describe what a part holds
(analysis/tables/self_check_parts.py: the usual sequence, the layer-time bound, a bad duration's
words, a far gap); every sum, mask, order and pass here is its own: each layer's time always judged
from its kernels' sums (no shortcut), each step's far gap always found by sorting its rows, rows
grouped by dicts and sorted by Python, whatever their times are.
"""
from __future__ import annotations

from collections import defaultdict

from analysis.attribution.rows import SECTION_LAYER, UNATTRIBUTED, KernelRow, StepRow, usable_statuses
from analysis.attribution.stages import EXTEND, UNKNOWN
from analysis.ingest.kernel_classes import class_of_name
from analysis.tables.self_check_parts import (
    RankChecks, _after_layers, _far_gap, _layer_time, _on_chain, _trimmed, bad_duration, judge_sequences,
    without_repeats,
)

_INF = float("inf")
_MOE_GROUPS = ("moe", "combine/share overlap")
_MOE_MODULES = ("router", "topk", "shared_experts")
_NOT_ROUTED = ("dispatch", "combine")


def rows_by_step(kernel_rows: list[KernelRow]) -> dict[tuple[str, int], list[KernelRow]]:
    """(rank, step) -> its rows in row order."""
    by_step: dict[tuple[str, int], list[KernelRow]] = defaultdict(list)
    for row in kernel_rows:
        by_step[(row.rank, row.step)].append(row)
    return by_step


def rank_checks(rank: str, steps: list[StepRow], by_step: dict, stage: str, strict: bool,
                chains: dict[tuple[str, int], list[int]], limits: dict) -> RankChecks:
    """The part of one rank: `steps` its StepRows (every stage) in order, `by_step` its rows."""
    part = RankChecks(rank, stage, strict)
    table_steps = [s for s in steps if s.stage == stage]
    used = [s for s in table_steps if s.status in usable_statuses(strict)]
    part.used_steps = len(used)
    if stage != UNKNOWN:
        _layer_sequence(part, table_steps, by_step, limits["layer_sequence"], chains)
    _used_steps(part, used, by_step, limits["layer_time"] if stage != UNKNOWN else None)
    _attention_cores(part, steps, by_step)
    _durations(part, steps, by_step, limits["durations"])
    return part


def _is_moe(row: KernelRow) -> bool:
    return row.group in _MOE_GROUPS or row.module in _MOE_MODULES


def _layer_classes(rows: list[KernelRow], ignore: frozenset[str]) -> tuple[str, ...]:
    """A layer's chain rows' classes by start, shared experts left out, without repeats and the
    collectives it ends with; under two-batch overlap micro-batch 0's, then 1's."""
    def classes(part: list[KernelRow]) -> tuple[str, ...]:
        names = [r.kernel_name for r in sorted(part, key=lambda r: r.start_us) if r.module != "shared_experts"]
        return _trimmed(without_repeats(tuple(c for c in map(class_of_name, names) if c not in ignore)))
    if not any(r.micro_batch for r in rows):
        return classes(rows)
    return tuple(c for mb in (0, 1) for c in classes([r for r in rows if r.micro_batch == mb]))


def _layer_sequence(part: RankChecks, steps: list[StepRow], by_step: dict, limits: dict, chains: dict) -> None:
    ignore = frozenset(limits.get("ignore_classes") or ())
    seen: dict = defaultdict(lambda: defaultdict(list))
    where: dict[tuple[int, int], list[KernelRow]] = {}
    for s in steps:
        rows = by_step.get((s.rank, s.step), [])
        known = chains.get((s.rank, s.step))
        chain = set(known) if known is not None else (_on_chain(rows) if rows else set())
        layer_rows: dict[int, list[KernelRow]] = defaultdict(list)
        on_chain: dict[int, list[KernelRow]] = defaultdict(list)
        for i, r in enumerate(rows):
            if r.section == SECTION_LAYER:
                layer_rows[r.layer].append(r)
                if i in chain:
                    on_chain[r.layer].append(r)
        previous = "none"
        own = s.step if s.stage == EXTEND else None
        for layer in sorted(layer_rows):
            kind = "MoE" if any(map(_is_moe, layer_rows[layer])) else "dense"
            seen[(kind, previous, own)][_layer_classes(on_chain[layer], ignore)].append((s.step, layer))
            where[(s.step, layer)] = on_chain[layer]
            previous = kind
    judge_sequences(part, seen, lambda step, layer: where.get((step, layer), []))


def _used_steps(part: RankChecks, used: list[StepRow], by_step: dict, time_limits: dict | None) -> None:
    sums = dict.fromkeys(("busy", "in_layers", "other", "unattributed", "waiting"), 0.0)
    empty: list[StepRow] = []
    for place, s in enumerate(used):
        rows = by_step.get((s.rank, s.step), [])
        routed = shared = 0.0
        for r in rows:
            sums["busy"] += r.busy_us
            if r.group == UNATTRIBUTED:
                sums["unattributed"] += r.busy_us
            if r.section != SECTION_LAYER:
                if r.group == "communication":
                    sums["waiting"] += r.busy_us
                continue
            sums["in_layers"] += r.busy_us
            if r.group == "other":
                sums["other"] += r.busy_us
            if r.module == "shared_experts":
                shared += r.busy_us
            elif r.group == "moe" and r.module not in _NOT_ROUTED:
                routed += r.busy_us
        part.routed_us += routed
        part.shared_us += shared
        if shared:
            part.routed_to_shared.append(routed / shared)
        if time_limits is not None:
            _layer_time(part, s, place, None, by_step, time_limits)
            layer_starts = [r.start_us for r in rows if r.section == SECTION_LAYER]
            first = min(layer_starts) if layer_starts else _INF
            if not any(r.section != SECTION_LAYER and r.start_us >= first for r in rows):
                empty.append(s)
    part.busy_us, part.in_layers_us, part.other_us = sums["busy"], sums["in_layers"], sums["other"]
    part.unattributed_us, part.waiting_us = sums["unattributed"], sums["waiting"]
    if time_limits is not None:
        _after_layers(part, empty, by_step)


def _attention_cores(part: RankChecks, steps: list[StepRow], by_step: dict) -> None:
    for s in steps:
        for r in by_step.get((s.rank, s.step), []):
            if class_of_name(r.kernel_name) != "attn_core":
                continue
            part.cores += 1
            if r.section != SECTION_LAYER:
                if not part.cores_outside:
                    part.first_core_outside = f"first: {s.rank} step {s.step}, {r.section} section, {r.kernel_name[:80]}"
                part.cores_outside += 1


def _durations(part: RankChecks, steps: list[StepRow], by_step: dict, limits: dict) -> None:
    """A kernel is looked at where its time is not a number >= 0, its start not finite, or it ends
    past the next step's start plus the slack."""
    slack = float(limits["slack_us"])
    far_us, far_ratio = float(limits["far_gap_s"]) * 1e6, float(limits["far_gap_ratio"])
    bad: list[str] = []
    steps = sorted(steps, key=lambda s: s.start_us)
    for s, nxt in zip(steps, [*steps[1:], None]):
        rows = by_step.get((s.rank, s.step), [])
        part.duration_kernels += len(rows)
        limit = nxt.start_us + slack if nxt is not None else _INF
        for r in rows:
            if not (0.0 <= r.busy_us < _INF and -_INF < r.start_us < _INF and r.start_us + r.busy_us <= limit):
                said = bad_duration(part.rank, s, nxt, r, slack)
                if said:
                    bad.append(said)
        gap = _far_gap(rows, far_us, far_ratio)
        if gap:
            bad.append(f"{part.rank} step {s.step}: {gap}")
    part.bad_durations = len(bad)
    part.first_bad_durations = bad[:3]
