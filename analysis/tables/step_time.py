"""Where the step goes besides kernel time: rows under the D4 table, in ms per step.

Why: a D4 cell sums kernel time per layer, but the end-to-end line is wall time; the rest is GPU
idle (the host launching late, a host sync, queued work) and collectives waiting for the last rank.
Each row is, like the end-to-end line, per rank the statistic over the table's steps, then the rank
policy; the columns of steps.csv hold every step and rank (analysis/attribution/idle.py). The
collective waits come from the wait / transfer split (comm_split.py), so they need several ranks.
"""
from __future__ import annotations

from collections import defaultdict

import msgspec

from analysis.attribution.comm_split import CommRow, RankCollectives
from analysis.attribution.rows import SECTION_LAYER, SECTION_PRE, StepRow
from analysis.markdown_text import markdown_row, markdown_text
from analysis.tables.comm_table import used_steps
from analysis.tables.d4_cells import D4Row, _per_rank_stat, _policy, column_stats

GROUP = "step time (ms/step)"
# (module, kernel, StepRow field): the rows, in the order the table shows them
ROWS = (
    ("GPU busy", "any stream", "busy_any_us"),
    ("waiting on collectives", "before the layers", "wait_pre_us"),
    ("waiting on collectives", "inside layers", "wait_layers_us"),
    ("waiting on collectives", "after the layers", "wait_post_us"),
    ("GPU idle", "before the layers", "idle_pre_us"),
    ("GPU idle", "between layers", "idle_between_us"),
    ("GPU idle", "inside layers", "idle_inside_us"),
    ("GPU idle", "after the layers", "idle_post_us"),
    ("GPU idle, host-bound", "launched late", "idle_host_launch_us"),
    ("GPU idle, host-bound", "after a host sync", "idle_host_sync_us"),
    ("GPU idle, work queued", "launched before the gap", "idle_queued_us"),
    ("GPU idle, no launch record", "", "idle_unknown_us"),
    ("host between steps", "previous step's end to this one's start", "gap_before_us"),
)
# the per-rank lines under the table: (heading, StepRow field)
RANK_COLUMNS = (("step", "step_us"), ("GPU busy", "busy_any_us"), ("wait before layers", "wait_pre_us"),
                ("wait in layers", "wait_layers_us"), ("idle before layers", "idle_pre_us"),
                ("idle between layers", "idle_between_us"), ("idle in layers", "idle_inside_us"),
                ("idle after layers", "idle_post_us"), ("host-bound", "idle_host_launch_us"),
                ("after host sync", "idle_host_sync_us"), ("queued", "idle_queued_us"))


def fill_waits(step_rows: list[StepRow], comm_rows: list[CommRow], collectives: dict[str, RankCollectives]) -> None:
    """Each step's collective wait by place (before, inside, after the layers), from the split; left
    None where none of the step's collectives could be split (a single rank). A collective outside
    the layers is placed by the section its rank's RankCollectives recorded at its (step, start)."""
    waits: dict[tuple[str, int], list[float]] = {}
    for c in comm_rows:
        if c.wait_us is None:
            continue
        if c.layer >= 0:
            where = SECTION_LAYER
        else:
            part = collectives.get(c.rank)
            where = part.sections.get((c.step, c.start_us), SECTION_PRE) if part is not None else SECTION_PRE
        cell = waits.setdefault((c.rank, c.step), [0.0, 0.0, 0.0])
        cell[0 if where == SECTION_PRE else 1 if where == SECTION_LAYER else 2] += c.wait_us
    for s in step_rows:
        cell = waits.get((s.rank, s.step))
        if cell is not None:
            s.wait_pre_us, s.wait_layers_us, s.wait_post_us = cell


def with_step_time(column, step_rows: list[StepRow], comm_rows: list[CommRow],
                   collectives: dict[str, RankCollectives], strict: bool = False):
    """The D4 column with its step-time rows and each rank's figures (mean over the used steps); the
    steps' collective waits are filled in first (fill_waits, from the split's `collectives`)."""
    fill_waits(step_rows, comm_rows, collectives)
    used = used_steps(step_rows, column.stage, strict)
    steps = [s for s in step_rows if (s.rank, s.step) in used]
    rows = []
    for module, kernel, name in ROWS:
        samples: dict[str, list[float]] = defaultdict(list)
        for s in steps:
            value = getattr(s, name)
            if value is not None:
                samples[s.rank].append(value)
        if not samples:
            continue
        value = _policy(_per_rank_stat(samples, column.stat), column.rank_policy)
        rows.append(D4Row(GROUP, module, kernel, value, value, 1.0, column_stats(samples, column.rank_policy)))
    per_rank: dict[str, dict[str, float]] = {}
    for heading, name in RANK_COLUMNS:
        samples = defaultdict(list)
        for s in steps:
            if getattr(s, name) is not None:
                samples[s.rank].append(getattr(s, name))
        for rank, value in _per_rank_stat(samples, "mean").items():
            per_rank.setdefault(rank, {})[heading] = value
    return msgspec.structs.replace(column, step_time_rows=rows, rank_step_time=per_rank)


def table_lines(columns) -> list[tuple[str, str, list[str]]]:
    """The rows under the table: (module, kernel, one value per column in ms, blank where a column
    has no such figure)."""
    keys = list(dict.fromkeys((r.module, r.kernel) for c in columns for r in c.step_time_rows))
    lookup = [{(r.module, r.kernel): r.value_us for r in c.step_time_rows} for c in columns]
    return [(module, kernel, [f"{look[(module, kernel)] / 1000:.2f}ms" if (module, kernel) in look else ""
                              for look in lookup]) for module, kernel in keys]


def rank_table(column) -> list[list[str]]:
    """Per rank, where its step goes, in ms per step: the header row, then a row per rank; empty for
    fewer than two ranks. The one formatting of these figures: d4.md and the view page both show it."""
    if len(column.rank_step_time) < 2:
        return []
    headings = [h for h, _ in RANK_COLUMNS if any(h in v for v in column.rank_step_time.values())]
    return [["rank", *headings]] + [[rank, *(f"{values[h] / 1000:.2f}" if h in values else "" for h in headings)]
                                    for rank, values in sorted(column.rank_step_time.items())]


def markdown_section(columns) -> list[str]:
    """Per rank, where its step goes (the table's rows mix ranks by the rank policy): a rank that
    waits in a collective for the others shows it here."""
    lines: list[str] = []
    for c in columns:
        table = rank_table(c)
        if not table:
            continue
        lines += ["", markdown_text(f"Where each rank's step goes ({c.name}): ms per step, mean over the table's "
                                    "steps (steps.csv has each step; docs/analysis.md defines each figure)"), "",
                  markdown_row(table[0]), "|" + "---|" * len(table[0])]
        lines += [markdown_row(row) for row in table[1:]]
    return lines
