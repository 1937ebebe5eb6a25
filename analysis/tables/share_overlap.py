"""How much of the shared expert hides under the all-to-all: the rows the seed table's
`combine/share overlap` group is about.

Why: DeepSeek-style serving runs the shared expert beside DeepEP's combine (on another stream, or
between the combine's send and receive) so that it costs nothing while the combine waits; SGLang
0.5.17 runs it beside the dispatch instead (seen on four H100s, docs/gpu-runs.md). The kernel rows
give the shared expert's busy time; this adds what of it the step still pays (exposed: no other
stream running) and what ran while a dispatch or a combine kernel ran on another stream.
"""
from __future__ import annotations

from collections import defaultdict

from analysis.attribution.overlap import merge_intervals
from analysis.attribution.rows import SECTION_LAYER, KernelRow
from analysis.tables.d4_cells import D4Row, _per_rank_stat, _policy, column_stats

SHARE_GROUP = "combine/share overlap"
SHARED_MODULE = "shared_experts"
UNDER = {("moe", "dispatch"): 0, ("moe", "combine"): 1, (SHARE_GROUP, "combine"): 1}
PARTS = ("busy", "exposed", "under dispatch", "under combine")


# (rank, step, layer) -> [busy, exposed, shared spans, dispatch spans, combine spans], a span (stream, start, end)
ShareCells = dict[tuple[str, int, int], list]


def share_cells(kernel_rows: list[KernelRow]) -> ShareCells:
    """Per layer of every step, in row order: the shared expert's busy and exposed us and the spans
    (stream, start, end) of its kernels and of the dispatch and combine kernels; empty without a
    shared expert. Made from one rank's rows alone: a rank's worker makes its own
    (analysis/pipeline/rank_digest.py)."""
    if not any(row.module == SHARED_MODULE and row.group == SHARE_GROUP for row in kernel_rows):
        return {}  # no shared expert: nothing below would be kept (a layer's spans cost memory on a large trace)
    return cells_of_layer_rows(kernel_rows)


def cells_of_layer_rows(kernel_rows: list[KernelRow]) -> ShareCells:
    """share_cells of rows from a rank that runs a shared expert (only its layer rows of the shared
    expert, the dispatch and the combine count)."""
    cells: ShareCells = {}
    for row in kernel_rows:
        if row.section != SECTION_LAYER:
            continue
        is_shared = row.group == SHARE_GROUP and row.module == SHARED_MODULE
        under = UNDER.get((row.group, row.module))
        if not is_shared and under is None:
            continue
        cell = cells.setdefault((row.rank, row.step, row.layer), [0.0, 0.0, [], [], []])
        span = (row.stream, row.start_us, row.start_us + row.busy_us)
        if is_shared:
            cell[0] += row.busy_us
            cell[1] += row.exposed_us
            cell[2].append(span)
        else:
            cell[3 + under].append(span)
    return cells


def share_overlap_rows(kernel_rows: list[KernelRow], used: set[tuple[str, int]], stat: str,
                       rank_policy: str, cells: ShareCells | None = None) -> list[D4Row]:
    """Per MoE layer (mean over the layers that run a shared expert): the shared expert's busy,
    exposed, under-dispatch and under-combine microseconds, as D4 rows of the group; none without a
    shared expert or without a dispatch or combine kernel in the layers. `cells`: share_cells of the
    same rows where rank workers made them."""
    every = share_cells(kernel_rows) if cells is None else cells
    cells = {key: cell for key, cell in every.items() if (key[0], key[1]) in used}
    if not any(cell[3] or cell[4] for cell in cells.values()):
        return []  # no all-to-all in the layers (one GPU, or EP without DeepEP): nothing to hide under
    per_step: dict[tuple[str, int], list[list[float]]] = defaultdict(list)
    for (rank, step, _layer), (busy, exposed, shared, dispatch, combine) in cells.items():
        if shared:
            per_step[(rank, step)].append([busy, exposed, _under(shared, dispatch), _under(shared, combine)])
    if not per_step:
        return []
    samples = [defaultdict(list) for _ in PARTS]
    for (rank, _step), layers in per_step.items():
        for i in range(len(PARTS)):
            samples[i][rank].append(sum(layer[i] for layer in layers) / len(layers))
    layers = sum(len(v) for v in per_step.values()) / len(per_step)
    return [D4Row(group=SHARE_GROUP, module=SHARED_MODULE, kernel=part,
                  value_us=_policy(_per_rank_stat(samples[i], stat), rank_policy),
                  exposed_us=0.0,
                  layers=layers, stats_us=column_stats(samples[i], rank_policy))
            for i, part in enumerate(PARTS)]


def _under(shared: list[tuple[int, float, float]], comm: list[tuple[int, float, float]]) -> float:
    """Time of the shared-expert kernels during which one of `comm` ran on another stream."""
    total = 0.0
    for stream, start, end in shared:
        covered = merge_intervals((s, e) for other, s, e in comm if other != stream and e > start and s < end)
        total += sum(min(e, end) - max(s, start) for s, e in covered)
    return total
