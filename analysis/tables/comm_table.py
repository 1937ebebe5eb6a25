"""The D4 column's communication split and expert load: rows, per-layer lines, stragglers.

The wait / transfer rows follow the D4 cell's definition (analysis/tables/d4.py): per rank and
step, the split summed over the layers that hold the module and divided by their number, then the
statistic over steps, then the rank policy. They sit apart from the kernel rows (group
`wait / transfer`) so the group sums are not counted twice. Per layer, the split (mean over the
used steps and ranks) stands beside the expert load of that layer when one was recorded.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

import msgspec

from analysis.attribution.comm_split import CommLayer, CommRow, stragglers
from analysis.attribution.rows import StepRow, usable_statuses
from analysis.ingest.expert_load import ExpertLoad
from analysis.markdown_text import markdown_row, markdown_text
from analysis.tables.d4_cells import D4Row, _per_rank_stat, _policy, _spread, column_stats, values_by_module

SPLIT_GROUP = "wait / transfer"
LOAD_GROUP = "expert load"
PARTS = ("wait", "transfer")
STRAGGLERS_SHOWN = 5


def used_steps(step_rows: list[StepRow], stage: str, strict: bool) -> set[tuple[str, int]]:
    usable = usable_statuses(strict)
    return {(s.rank, s.step) for s in step_rows if s.stage == stage and s.status in usable}


def with_comm(column, comm_rows: list[CommRow], step_rows: list[StepRow], strict: bool = False,
              expert_load: ExpertLoad | None = None):
    """The D4 column with its wait / transfer rows, per-layer split, stragglers and expert load."""

    used = used_steps(step_rows, column.stage, strict)
    in_used = [c for c in comm_rows if (c.rank, c.step) in used and c.stage == column.stage]
    split = [c for c in in_used if c.wait_us is not None]
    per_step: dict[tuple[str, str], dict[tuple[str, int], list]] = defaultdict(dict)
    for c in split:
        cell = per_step[(c.group, c.module)].setdefault((c.rank, c.step), [0.0, 0.0, set()])
        cell[0] += c.wait_us
        cell[1] += c.transfer_us
        cell[2].add(c.layer)
    rows = []
    for (group, module), cells in per_step.items():
        for index, part in enumerate(PARTS):
            samples: dict[str, list[float]] = defaultdict(list)
            for (rank, _step), cell in cells.items():
                samples[rank].append(cell[index] / len(cell[2]))
            value = _policy(_per_rank_stat(samples, column.stat), column.rank_policy)
            rows.append(D4Row(group=SPLIT_GROUP, module=module, kernel=part, value_us=value, exposed_us=value,
                              stats_us=column_stats(samples, column.rank_policy),
                              layers=statistics.fmean(len(cell[2]) for cell in cells.values()),
                              step_sd_us=_spread(samples, column.rank_policy)))
    return msgspec.structs.replace(column, comm_rows=rows, comm_layers=_layers(split), comm_kernels=len(in_used),
                                   comm_unsplit=len(in_used) - len(split),
                                   stragglers=[s for s in stragglers(split) if s.others_wait_us > 0][:STRAGGLERS_SHOWN], expert_load=expert_load)


def _layers(split: list[CommRow]) -> list[CommLayer]:
    by_layer: dict[tuple[int, str], list[CommRow]] = defaultdict(list)
    for c in split:
        by_layer[(c.layer, c.module)].append(c)
    out = []
    for (layer, module), copies in sorted(by_layer.items()):
        steps = {(c.rank, c.step, c.micro_batch) for c in copies}
        lasts = [c.last_rank for c in copies if c.rank == c.last_rank]
        out.append(CommLayer(layer=layer, module=module,
                             busy_us=sum(c.busy_us for c in copies) / len(steps),
                             wait_us=sum(c.wait_us for c in copies) / len(steps),
                             transfer_us=sum(c.transfer_us for c in copies) / len(steps),
                             last_rank=max(sorted(set(lasts)), key=lasts.count) if lasts else ""))
    return out


def extra_rows(columns) -> list[tuple[str, str, str, list[str]]]:
    """Table rows after the groups: the wait / transfer split of each collective module, then the
    expert load per MoE layer (busiest expert's tokens / mean tokens per expert)."""

    out = [(SPLIT_GROUP, module, part, values)
           for module, part, values in values_by_module(columns, lambda c: c.comm_rows)]
    layers = sorted({row.layer for c in columns if c.expert_load for row in c.expert_load.layers})
    for layer in layers:
        values = []
        for c in columns:
            row = next((r for r in c.expert_load.layers if r.layer == layer), None) if c.expert_load else None
            values.append(f"{row.max_tokens} / {row.mean_tokens:.1f} ({row.imbalance:.2f}x)" if row else "")
        out.append((LOAD_GROUP, f"layer {layer}", "busiest / mean tokens", values))
    return out


def markdown_sections(columns) -> list[str]:
    """Lines under the D4 table: who the others wait for, and per MoE layer the split beside the
    expert load."""
    lines: list[str] = []
    for c in columns:
        if c.comm_unsplit:
            why = ("one rank cannot tell waiting from moving data" if len(c.ranks) < 2
                   else "they have no copy on some rank of their step")
            lines += ["", markdown_text(f"{c.name}: {c.comm_unsplit} of {c.comm_kernels} communication kernels are "
                                        f"not split into wait and transfer: {why} (comm.csv)")]
        table = straggler_table(c)
        if table:
            lines += ["", markdown_text(f"Stragglers ({c.name}): the rank the others wait for, largest wait first"), "",
                      markdown_row(table[0]), "|" + "---|" * len(table[0])]
            lines += [markdown_row(row) for row in table[1:]]
        layer_lines = _layer_table(c)
        if layer_lines:
            lines += ["", markdown_text(f"Per layer ({c.name}): us, mean over the used steps and ranks"), "",
                      *layer_lines]
    return lines


def straggler_table(c) -> list[list[str]]:
    """The rank the others wait for, per collective, largest wait first: the header row, then a row
    per straggler; empty when there is none. The one formatting of them: d4.md and the view page."""
    if not c.stragglers:
        return []
    rows = [["layer", "collective", "last rank", "last in", "others wait (us)", "it ran just before", "idle before (us)"]]
    for s in c.stragglers:
        before = s.preceding_module if s.preceding_layer == s.layer else f"{s.preceding_module} (layer {s.preceding_layer})"
        rows.append([str(s.layer), s.module, s.rank, f"{s.last_share_pct:.0f}% of {s.collectives}",
                     f"{s.others_wait_us:.1f}", before or "-", f"{s.idle_before_us:.1f}"])
    return rows


def _layer_table(c) -> list[str]:
    modules = sorted({cl.module for cl in c.comm_layers})
    load = {row.layer: row for row in c.expert_load.layers} if c.expert_load else {}
    layers = sorted({cl.layer for cl in c.comm_layers} | set(load))
    if not layers:
        return []
    lookup = {(cl.layer, cl.module): cl for cl in c.comm_layers}
    header = ["layer"]
    for m in modules:
        header += [f"{m} wait", f"{m} transfer", f"{m} last rank"]
    if load:
        header += ["busiest expert (tokens)", "mean per expert (tokens)", "busiest / mean", "tokens per rank"]
    out = [markdown_row(header), "|" + "---|" * len(header)]
    for layer in layers:
        cells = [str(layer)]
        for m in modules:
            cl = lookup.get((layer, m))
            cells += [f"{cl.wait_us:.1f}", f"{cl.transfer_us:.1f}", cl.last_rank] if cl else ["", "", ""]
        if load:
            row = load.get(layer)
            cells += ([str(row.max_tokens), f"{row.mean_tokens:.1f}", f"{row.imbalance:.2f}",
                       " / ".join(str(t) for t in row.rank_tokens) or "-"] if row else ["", "", "", ""])
        out.append(markdown_row(cells))
    return out
