"""What two-batch overlap hides: one micro-batch's compute while the other's tokens are in flight.

Why: TBO exists so that DeepEP's dispatch and combine cost nothing: each is sent, the other micro-batch
computes, and the receive then finds the tokens there (sglang/srt/batch_overlap/). On one stream there
is no stream overlap to measure; what counts is, per micro-batch, the time between a send's end and its
receive's start (in flight), how much of it the other micro-batch's kernels filled (hidden under it) and
what the receive still waits (exposed). Shown as the seed shows the shared expert under the combine: per
MoE layer, both micro-batches summed, the statistic over steps, then the rank policy.

A prefill's DeepEP runs in normal mode: each dispatch and combine is one launch group (layout, notify,
transfer) on a stream of its own, no send / receive pair. There the group's span is in flight, the
other micro-batch's kernels inside it are under it, and what no other stream covered of the group's
kernels (their exposed time) is what the step still waits: the third part is named `exposed`.
"""
from __future__ import annotations

from collections import defaultdict

from analysis.attribution.overlap import merge_intervals
from analysis.attribution.rows import SECTION_LAYER, KernelRow
from analysis.attribution.two_batch import is_two_phase
from analysis.ingest.kernel_classes import class_of_name
from analysis.tables.d4_cells import D4Row, _per_rank_stat, _policy, column_stats

TBO_GROUP = "two-batch overlap"
PARTS = ("in flight", "other micro-batch under it", "receive (exposed)")
ONE_LAUNCH_PARTS = ("in flight", "other micro-batch under it", "exposed")  # DeepEP normal mode (prefill)


TBO_NOTE = "two-batch overlap:"  # what a step's note says where its layers were read as two micro-batches


def tbo_overlap_rows(kernel_rows: list[KernelRow], step_rows, used: set[tuple[str, int]], stage: str, stat: str,
                     rank_policy: str) -> list[D4Row]:
    """Per MoE layer: dispatch and combine in flight, the other micro-batch's busy time under it and the
    receive's busy time; none where no used step was read as two micro-batches (its note says so: the
    rows are not read again for a trace without TBO)."""
    if not any(TBO_NOTE in s.note for s in step_rows if (s.rank, s.step) in used):
        return []
    steps: dict[tuple[str, int], list[KernelRow]] = defaultdict(list)
    two_batch = False
    for row in kernel_rows:
        if row.section == SECTION_LAYER and row.stage == stage and (row.rank, row.step) in used:
            steps[(row.rank, row.step)].append(row)
            two_batch = two_batch or row.micro_batch == 1
    if not two_batch:
        return []
    samples: dict[tuple[str, str], dict[str, list[float]]] = {}
    layers_seen = []
    for (rank, _step), rows in steps.items():
        per_layer, parts = _step_layers(rows)
        if not per_layer:
            continue
        layers_seen.append(len(per_layer))
        for module in ("dispatch", "combine"):
            sums = [0.0] * len(parts)
            for cells in per_layer.values():
                for i, value in enumerate(cells[module]):
                    sums[i] += value
            for i, part in enumerate(parts):
                samples.setdefault((module, part), defaultdict(list))[rank].append(sums[i] / len(per_layer))
    if not layers_seen:
        return []
    layers = sum(layers_seen) / len(layers_seen)
    return [D4Row(group=TBO_GROUP, module=module, kernel=part,
                  value_us=_policy(_per_rank_stat(values, stat), rank_policy), exposed_us=0.0,
                  layers=layers, stats_us=column_stats(values, rank_policy))
            for (module, part), values in samples.items()]


def _step_layers(rows: list[KernelRow]) -> tuple[dict[int, dict[str, list[float]]], tuple[str, ...]]:
    """Per MoE layer with two micro-batches: per module, [in flight, other under it, the wait] summed over
    its micro-batches, and the parts' names. Low latency: the wait is the receive's busy time, and a
    micro-batch whose send and receive are not one pair each is left out. Normal mode (one launch
    group): the group's span is in flight and its kernels' exposed time the wait."""
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)  # micro-batch -> its kernels' spans
    phased: dict[tuple[int, int, str], list[KernelRow]] = defaultdict(list)
    whole: dict[tuple[int, int, str], list[KernelRow]] = defaultdict(list)
    for r in rows:
        spans[r.micro_batch].append((r.start_us, r.start_us + r.busy_us))
        if r.module in ("dispatch", "combine"):
            if is_two_phase(r.kernel_name):
                phased[(r.layer, r.micro_batch, r.module)].append(r)
            elif class_of_name(r.kernel_name) in ("dispatch", "combine"):
                whole[(r.layer, r.micro_batch, r.module)].append(r)
    merged = {mb: merge_intervals(s) for mb, s in spans.items()}
    out: dict[int, dict[str, list[float]]] = {}

    def add(layer: int, mb: int, module: str, lo: float, hi: float, wait: float) -> None:
        under = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in merged[1 - mb] if e > lo and s < hi)
        cell = out.setdefault(layer, {"dispatch": [0.0] * 3, "combine": [0.0] * 3})[module]
        cell[0] += max(0.0, hi - lo)
        cell[1] += under
        cell[2] += wait
    for (layer, mb, module), pair in phased.items():
        if len(pair) != 2 or 1 - mb not in merged:
            continue
        send, recv = sorted(pair, key=lambda r: r.start_us)
        add(layer, mb, module, send.start_us + send.busy_us, recv.start_us, recv.busy_us)
    if phased:
        return out, PARTS
    for (layer, mb, module), group in whole.items():
        if 1 - mb in merged:
            add(layer, mb, module, min(r.start_us for r in group), max(r.start_us + r.busy_us for r in group),
                sum(r.exposed_us for r in group))
    return out, ONE_LAUNCH_PARTS
