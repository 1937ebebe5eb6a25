"""The D4 profile table: per-layer microseconds per group / module / kernel, one column per run.

A cell is built from KernelRows: for each (rank, step) the row's busy time summed over the
layers that have it, divided by that number of layers (so a MoE row reads "per MoE layer" on
DeepSeek-V3, whose first 3 layers are dense); then a statistic over steps (mean, median, p90);
then the rank policy (mean over ranks, max over ranks, or one named rank). Only steps of the
main stage whose layer count matched the model are used; the others are counted in `skipped`.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

import msgspec

from analysis.markdown_text import markdown_row, markdown_text
from analysis.sol.estimate import SolSettings
from analysis.attribution.comm_split import CommLayer, Straggler
from analysis.ingest.expert_load import ExpertLoad
from analysis.attribution.rows import SECTION_LAYER, SECTION_PRE, SECTION_SIDE, KernelRow, StepRow, usable_statuses
from analysis.tables.comm_table import extra_rows, markdown_sections  # beside the groups, not in their sums
from analysis.tables.share_overlap import SHARE_GROUP, ShareCells, share_overlap_rows
from analysis.tables.shown_names import with_shown_names
from analysis.tables import derived_notes
from analysis.tables.tbo_overlap import TBO_GROUP, tbo_overlap_rows
from analysis.tables import load_compare, measured_shape, step_time, token_cost
from analysis.tables.measured_shape import MeasuredShape
from analysis.tables.load_compare import LoadCompare
from analysis.tables.token_cost import TokenCost
from analysis.attribution.stages import DRAFT, DRAFT_EXTEND, TABLE_STAGES, UNKNOWN, VERIFY
from analysis.tables.d4_cells import (  # noqa: F401 - STATS, D4Row and values_by_module are imported from here too
    STATS,
    D4Row,
    _fmt,
    _per_rank_stat,
    _policy,
    _spread,
    _stat,
    column_stats,
    same_stats,
    values_by_module,
)

MTP_GROUP = "mtp"
# The seed table's group order; groups not listed follow in order of first appearance.
GROUP_ORDER = ("attention", "gate", "moe", "combine/share overlap", "mlp", "communication", "other", "unattributed")


class D4Column(msgspec.Struct):
    name: str
    stage: str
    stat: str
    rank_policy: str
    step_ms: float  # end-to-end per step (for MTP: per verify iteration, drafts included)
    layers_ms: float
    num_layers: float
    pre_ms: float
    post_ms: float
    rows: list[D4Row]
    side_ms: float = 0.0  # copies off the step's threads (attribution/off_thread.py), beside the step
    mtp_rows: list[D4Row] = []
    share_rows: list[D4Row] = []  # the shared expert's busy / exposed / under-combine time (share_overlap.py)
    tbo_rows: list[D4Row] = []  # two-batch overlap: dispatch / combine in flight, the other micro-batch under it (tbo_overlap.py)
    accept_length: float | None = None
    per_token_ms: float | None = None
    steps_used: int = 0
    steps_skipped: int = 0
    steps_mismatched: int = 0  # used steps whose layer count differs from the expected one (not --strict)
    layer_counts: str = ""  # what was found against what was expected, for the notes
    sources: dict[str, float] = {}  # share of the used steps' busy time by what named the kernels (%)
    ranks: list[str] = []
    rank_step_ms: dict[str, float] = {}
    rank_spread_pct: float = 0.0
    straggler: str | None = None
    signature: str = ""
    signature_evidence: str = ""  # the signature's `evidence:` (its note says when no real trace confirms it)
    model: str | None = None
    sol: SolSettings | None = None  # set when the rows carry SOL columns
    # Communication wait / transfer and expert load (analysis/tables/comm_table.py fills them).
    comm_rows: list[D4Row] = []
    comm_layers: list[CommLayer] = []
    stragglers: list[Straggler] = []
    expert_load: ExpertLoad | None = None
    comm_kernels: int = 0  # communication kernels in the used steps
    comm_unsplit: int = 0  # of those, the ones with no copy on some rank of their step: no split
    failed_files: list[str] = []  # "path: why" of each given file that could not be analysed
    checks: str = ""  # the self-checks' verdict line (analysis/tables/self_checks.py)
    failed_checks: list[str] = []  # names of the self-checks that failed
    step_sd_ms: float | None = None  # end-to-end's spread over steps, as D4Row.step_sd_us (compare's noise)
    # Where the step goes besides kernel time (analysis/tables/step_time.py fills them): rows in
    # us per step, and per rank the mean of each figure over the used steps.
    step_time_rows: list[D4Row] = []
    rank_step_time: dict[str, dict[str, float]] = {}
    load: LoadCompare | None = None  # the profiled steps against the load records (load_compare.py)
    token_cost: TokenCost | None = None  # per accepted token (MTP) or per decode step (token_cost.py)
    measured_shape: MeasuredShape | None = None  # batch and KV length from the steps' labels (measured_shape.py)


def main_stage(steps: Iterable[StepRow], prefer: str | None = None) -> str:
    """The stage the table describes: `prefer` where any step has it (AnalysisOptions.stage: a prefill
    profile's window also holds decode steps), else verify (MTP) over decode over extend, among usable steps."""
    steps = list(steps)
    if prefer is not None and any(s.stage == prefer for s in steps):
        return prefer
    ok = [s.stage for s in steps if s.status == "ok"] or [s.stage for s in steps]
    for stage in TABLE_STAGES:
        if stage in ok:
            return stage
    return max(set(ok), key=ok.count) if ok else UNKNOWN


class _LayerSet:
    """The distinct layers that hold a D4 row in one step, as the bits of an int: a set per (step, row)
    cell held about 18 MB for the 406 MB generated trace's 15,000 cells (docs/performance.md); a
    layer outside 0..4095 (only a hostile saved table has one) is kept in a set beside the bits."""

    __slots__ = ("bits", "others")

    def __init__(self):
        self.bits = 0
        self.others: set[int] | None = None

    def add(self, layer: int) -> None:
        if 0 <= layer < 4096:
            self.bits |= 1 << layer
        else:
            if self.others is None:
                self.others = set()
            self.others.add(layer)

    def __len__(self) -> int:
        return self.bits.bit_count() + (len(self.others) if self.others else 0)


class StepCells:
    """What one step's kernel rows add to the D4 column: per (group, module, kernel) its busy and
    exposed us and the layers holding it (in the order the keys first appear), the busy us before
    and after the layers, the MTP rows' busy us outside the layers (None: no such row), and each
    row's busy us by what named it, in row order. Picklable: a rank's worker makes its steps' cells
    beside the other ranks' workers, and the parent only picks the used steps' cells."""

    __slots__ = ("cells", "outside", "mtp_us", "source_us")

    def __init__(self):
        self.cells: dict[tuple[str, str, str], list] = {}
        self.outside = [0.0, 0.0, 0.0]  # before, after, beside (copies off the step's threads)
        self.mtp_us: float | None = None
        self.source_us: dict[str, list[float]] = {}  # or float64 arrays, made from columns (column_cells.py)


def step_cells(kernel_rows: list[KernelRow]) -> dict[tuple[str, int], StepCells]:
    """(rank, step) -> its StepCells, every step, in the order of their rows."""
    out: dict[tuple[str, int], StepCells] = {}
    row_rank = row_step = step = None  # rows come step by step: a step's cells are looked up once
    for row in kernel_rows:
        if row.step != row_step or row.rank != row_rank:
            row_rank, row_step = row.rank, row.step
            step = out.get((row_rank, row_step))
            if step is None:
                step = out[(row_rank, row_step)] = StepCells()
            cells, by_source = step.cells, step.source_us
        values = by_source.get(row.source)
        if values is None:
            values = by_source[row.source] = []
        values.append(row.busy_us)
        if row.section == SECTION_LAYER:
            key = (row.group, row.module, row.kernel)
            cell = cells.get(key)
            if cell is None:
                cell = cells[key] = [0.0, 0.0, _LayerSet()]
            cell[0] += row.busy_us
            cell[1] += row.exposed_us
            cell[2].add(row.layer)
        elif row.section == SECTION_SIDE:
            step.outside[2] += row.busy_us
        else:
            step.outside[0 if row.section == SECTION_PRE else 1] += row.busy_us
            if row.group == MTP_GROUP:
                step.mtp_us = (step.mtp_us or 0.0) + row.busy_us
    return out


def build_column(
    kernel_rows: list[KernelRow],
    step_rows: list[StepRow],
    name: str,
    stat: str = "mean",
    rank_policy: str = "mean",
    accept_length: float | None = None,
    row_order: list[tuple[str, str, str]] | None = None,
    signature: str = "",
    model: str | None = None,
    strict: bool = False,
    signature_evidence: str = "",
    cells: dict[tuple[str, int], StepCells] | None = None,
    share: ShareCells | None = None,
    prefer_stage: str | None = None,
) -> D4Column:
    """The column of these rows; `cells` and `share`: step_cells and share_cells of the same rows
    where rank workers made them."""
    stage = main_stage(step_rows, prefer_stage)
    usable = usable_statuses(strict)
    used = {(s.rank, s.step) for s in step_rows if s.stage == stage and s.status in usable}
    skipped = sum(1 for s in step_rows if s.stage == stage and s.status not in usable)
    mismatched = [s for s in step_rows if s.stage == stage and s.status == "layer_count_mismatch"]
    every_step = step_cells(kernel_rows) if cells is None else cells
    # (rank, step) -> key -> [busy, exposed, the layers holding it (_LayerSet)], of the used steps
    per_step: dict[tuple[str, int], dict[tuple[str, str, str], list]] = {}
    outside: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    mtp_kernels: dict[tuple[str, int], float] = {}
    order: dict[tuple[str, str, str], None] = dict.fromkeys(row_order or [])
    source_us: dict[str, list[list[float]]] = defaultdict(list)
    for key_step, step in every_step.items():  # steps in the order of their rows
        if key_step not in used:
            continue
        per_step[key_step] = step.cells
        order.update((key, None) for key in step.cells if key not in order)
        outside[key_step] = step.outside
        if step.mtp_us is not None:
            mtp_kernels[key_step] = step.mtp_us
        for source, values in step.source_us.items():
            source_us[source].append(values)
    from analysis.numeric import np, sequential_sum

    by_source: dict[str, float] = {}
    for source, runs in source_us.items():  # lists, or arrays from a rank's columns (column_cells.py)
        # added row after row from 0.0, as the rows come
        by_source[source] = sequential_sum(np.concatenate([np.asarray(v, dtype=np.float64) for v in runs]))
    # key -> its cells, in the order of the steps: one pass over the steps' cells (a pass per key over
    # every step was keys x steps lookups: a run whose GEMM names vary with the batch has a key each)
    by_key: dict[tuple[str, str, str], list[tuple[str, list]]] = defaultdict(list)
    for (rank, _step), cells in per_step.items():
        for key, cell in cells.items():
            by_key[key].append((rank, cell))
    rows: list[D4Row] = []
    for key in order:
        samples: dict[str, list[float]] = defaultdict(list)
        exposed: dict[str, list[float]] = defaultdict(list)
        layer_counts: list[int] = []
        for rank, cell in by_key.get(key, ()):
            n = len(cell[2])
            samples[rank].append(cell[0] / n)
            exposed[rank].append(cell[1] / n)
            layer_counts.append(n)
        if not layer_counts:
            continue
        rows.append(
            D4Row(
                group=key[0],
                module=key[1],
                kernel=key[2],
                value_us=_policy(_per_rank_stat(samples, stat), rank_policy),
                exposed_us=_policy(_per_rank_stat(exposed, stat), rank_policy),
                layers=statistics.fmean(layer_counts),
                stats_us=column_stats(samples, rank_policy),
                step_sd_us=_spread(samples, rank_policy),
            )
        )
    steps_by_rank: dict[str, list[StepRow]] = defaultdict(list)
    for s in step_rows:
        if (s.rank, s.step) in used:
            steps_by_rank[s.rank].append(s)

    def step_metric(fn) -> float:
        return _policy({r: _stat([fn(s) for s in ss], stat) for r, ss in steps_by_rank.items()}, rank_policy)

    step_us = step_metric(lambda s: s.step_us)
    step_sd_us = _spread({r: [s.step_us for s in ss] for r, ss in steps_by_rank.items()}, rank_policy)
    layers_us = step_metric(lambda s: s.layers_us)
    num_layers = step_metric(lambda s: s.layers_found)
    pre_us = step_metric(lambda s: outside[(s.rank, s.step)][0])
    post_us = step_metric(lambda s: outside[(s.rank, s.step)][1])
    side_us = step_metric(lambda s: outside[(s.rank, s.step)][2])
    mtp_rows: list[D4Row] = []
    if stage == VERIFY:
        step_us += _add_mtp_rows(step_rows, steps_by_rank, mtp_kernels, stat, rank_policy, mtp_rows)
    rank_ms = {r: _stat([s.step_us for s in ss], stat) / 1000 for r, ss in steps_by_rank.items()}
    spread, straggler = 0.0, None
    if len(rank_ms) > 1:
        mid = statistics.median(rank_ms.values())
        spread = 100 * (max(rank_ms.values()) - min(rank_ms.values())) / mid if mid else 0.0
        straggler = max(rank_ms, key=rank_ms.get)
    # a plain decode step yields one token: the accept length divides only a verify iteration
    accept_length = accept_length if stage == VERIFY else None
    per_token = (step_us / 1000) / accept_length if accept_length else None
    return D4Column(
        name=name, stage=stage, stat=stat, rank_policy=rank_policy,
        step_ms=step_us / 1000, layers_ms=layers_us / 1000, num_layers=num_layers,
        pre_ms=pre_us / 1000, post_ms=post_us / 1000, side_ms=side_us / 1000, rows=rows, mtp_rows=mtp_rows,
        share_rows=share_overlap_rows(kernel_rows, used, stat, rank_policy, share),
        tbo_rows=tbo_overlap_rows(kernel_rows, step_rows, used, stage, stat, rank_policy),
        accept_length=accept_length, per_token_ms=per_token,
        steps_used=len(used), steps_skipped=skipped, ranks=sorted(steps_by_rank),
        steps_mismatched=0 if strict else len(mismatched), layer_counts=_layer_counts(step_rows, stage, mismatched),
        sources={k: 100 * v / total for k, v in by_source.items()} if (total := sum(by_source.values())) else {},
        rank_step_ms=rank_ms, rank_spread_pct=spread, straggler=straggler,
        signature=signature, signature_evidence=signature_evidence, model=model,
        step_sd_ms=None if step_sd_us is None else step_sd_us / 1000,
        token_cost=token_cost.token_cost(step_rows, used, stage, stat, rank_policy, accept_length),
        measured_shape=measured_shape.measured_shape(step_rows, used),
    )


def _layer_counts(step_rows: list[StepRow], stage: str, mismatched: list[StepRow]) -> str:
    """'found 4 layers (1 dense + 3 MoE), expected 61' style summary for the table's notes."""
    steps = [s for s in step_rows if s.stage == stage]
    if not steps:
        return ""
    found = sorted({s.layers_found for s in steps})
    moe = sorted({s.moe_layers_found for s in steps if s.moe_layers_found is not None})
    text = "found " + "/".join(str(n) for n in found) + " layers"
    if len(found) == 1 and len(moe) == 1:
        text += f" ({found[0] - moe[0]} dense + {moe[0]} MoE)"
    if mismatched:
        text += "; " + "; ".join(sorted({s.note.split("; ")[-1] for s in mismatched}))
    return text


def _add_mtp_rows(step_rows, verify_by_rank, mtp_kernels, stat, policy, out: list[D4Row]) -> float:
    """MTP group rows; returns the draft time per verify iteration (us) to add to the step."""
    extra = 0.0
    for stage, module, label in ((DRAFT, "draft layer", "per draft step"), (DRAFT_EXTEND, "draft extend", "per step")):
        by_rank: dict[str, list[float]] = defaultdict(list)
        for s in step_rows:  # whatever layers a draft step was cut into, its time is spent
            if s.stage == stage:
                by_rank[s.rank].append(s.step_us)
        if not by_rank:
            continue
        value = _policy(_per_rank_stat(by_rank, stat), policy)
        per_iter = statistics.fmean(
            len(by_rank.get(r, [])) / len(v) for r, v in verify_by_rank.items() if v
        )
        out.append(D4Row(MTP_GROUP, module, label, value, value, per_iter, same_stats(value),
                         step_sd_us=_spread(by_rank, policy)))
        extra += value * per_iter
    sampling: dict[str, list[float]] = defaultdict(list)
    for (rank, _step), us in mtp_kernels.items():
        sampling[rank].append(us)
    if sampling:
        value = _policy(_per_rank_stat(sampling, stat), policy)
        out.append(D4Row(MTP_GROUP, "tree / sampling", "per verify step", value, value, 1.0, same_stats(value),
                         step_sd_us=_spread(sampling, policy)))
    return extra


# ---------------------------------------------------------------- rendering

_ZH_GROUPS = {"attention": "attention层", "gate": "gate层", "moe": "moe层", "mlp": "mlp层"}
_TEXT = {
    "en": {"group": "group", "module": "module", "kernel": "kernel", "e2e": "end-to-end (ms/step)",
           "layers": "all {n} layers (ms)", "sum": "sum", "pre": "before layers (ms)", "post": "after layers (ms)",
           "side": "copies off the step's thread (ms, beside the layers)",
           "token": "per accepted token (ms)", "title": "D4 profile (us per layer unless noted)",
           "sol_us": "SOL us", "sol_pct": "% of SOL", "bound": "bound",
           "sol_note": "SOL columns ({name}): {what}; % of SOL = 100 x SOL / measured (100% = at the hardware limit)"},
    "zh": {"group": "层级", "module": "模块", "kernel": "Kernel", "e2e": "端到端", "layers": "{n}层执行耗时",
           "sum": "sum", "pre": "层前耗时", "post": "层后耗时", "side": "步骤线程外的拷贝 (ms, 与各层并行)", "token": "每接受token耗时", "title": "D4 Profile",
           "sol_us": "SOL耗时(us)", "sol_pct": "SOL占比", "bound": "瓶颈",
           "sol_note": "SOL列（{name}）：{what}；SOL占比 = 100 x SOL / 实测（100% 即达到硬件上限）"},
}


def group_label(group: str, lang: str = "en") -> str:
    """A group's name as the seed table writes it in that language (attention层 in Chinese)."""
    return _ZH_GROUPS.get(group, group) if lang == "zh" else group


SOL_CELLS = 3  # SOL us, % of SOL, bound: after the value of every column that has SOL settings


def _sol_cells(row: D4Row | None) -> list[str]:
    if row is None or row.sol_us is None:
        return [""] * SOL_CELLS
    pct = "" if row.sol_pct is None else f"{row.sol_pct:.0f}%"
    return [f"{row.sol_us:.2f}", pct, row.bound or ""]


def table_rows(columns: list[D4Column], lang: str = "en") -> list[list[str]]:
    """The D4 table as rows of cells (header first), shared by the markdown and CSV writers.

    A column with SOL settings (D4Column.sol) is followed by its SOL us, % of SOL and bound cells.
    """
    if lang not in _TEXT:
        raise ValueError(f"unknown language {lang!r}: use en or zh")
    text = _TEXT[lang]

    def group_name(group: str) -> str:
        return group_label(group, lang)

    def cells(per_column: list[str], sol_rows: list[D4Row | None] | None = None) -> list[str]:
        out_cells: list[str] = []
        for i, c in enumerate(columns):
            out_cells.append(per_column[i])
            if c.sol is not None:
                out_cells += _sol_cells(sol_rows[i] if sol_rows else None)
        return out_cells

    header = [text["group"], text["module"], text["kernel"]]
    for c in columns:
        header.append(c.name)
        if c.sol is not None:
            suffix = f" ({c.name})" if len(columns) > 1 else ""
            header += [text["sol_us"] + suffix, text["sol_pct"] + suffix, text["bound"] + suffix]
    n_layers = {round(c.num_layers) for c in columns if c.num_layers}
    layers_label = text["layers"].format(n="/".join(str(n) for n in sorted(n_layers)) or "?")
    out = [header]
    out.append([text["e2e"], "", "", *cells([_fmt(c.step_ms, "ms") for c in columns])])
    out.append([layers_label, "", "", *cells([_fmt(c.layers_ms, "ms") for c in columns])])
    keys: dict[tuple[str, str, str], None] = {}
    for c in columns:
        for r in c.rows:
            keys.setdefault((r.group, r.module, r.kernel), None)
    lookup = [{(r.group, r.module, r.kernel): r for r in c.rows} for c in columns]
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for key in keys:
        groups.setdefault(key[0], []).append(key)
    canonical = {g: i for i, g in enumerate(GROUP_ORDER)}
    ordered_groups = sorted(groups, key=lambda g: canonical.get(g, len(canonical)))
    for group in ordered_groups:
        members = groups[group]
        for key in members:
            hits = [look.get(key) for look in lookup]
            out.append([group_name(group), key[1], key[2], *cells([_fmt(h.value_us) if h else "" for h in hits], hits)])
        sums = [sum(look[k].value_us for k in members if k in look) for look in lookup]
        out.append([group_name(group), text["sum"], "", *cells([_fmt(s) for s in sums])])
        if group == SHARE_GROUP:  # what of the shared expert the step pays, and what hides under the combine
            out += [[group_name(group), module, part, *cells(values)]
                    for module, part, values in values_by_module(columns, lambda c: c.share_rows)]
        if group == "moe":  # two-batch overlap: what of the all-to-all the other micro-batch hides
            out += [[TBO_GROUP, module, part, *cells(values)]
                    for module, part, values in values_by_module(columns, lambda c: c.tbo_rows)]

    out += [[group_name(g), m, k, *cells(v)] for g, m, k, v in extra_rows(columns)]
    out += [[MTP_GROUP, module, kernel, *cells(values)]
            for module, kernel, values in values_by_module(columns, lambda c: c.mtp_rows)]
    if any(c.per_token_ms for c in columns):
        out.append([text["token"], "", "", *cells([_fmt(c.per_token_ms, "ms") for c in columns])])
    out.append([text["pre"], "", "", *cells([_fmt(c.pre_ms, "ms") for c in columns])])
    out.append([text["post"], "", "", *cells([_fmt(c.post_ms, "ms") for c in columns])])
    if any(c.side_ms for c in columns):
        out.append([text["side"], "", "", *cells([_fmt(c.side_ms, "ms") for c in columns])])
    out += [[step_time.GROUP, module, kernel, *cells(values)] for module, kernel, values in step_time.table_lines(columns)]
    out += [[load_compare.GROUP, module, kernel, *cells(values)]
            for module, kernel, values in load_compare.table_lines(columns)]
    out += [[token_cost.GROUP, module, kernel, *cells(values)]
            for module, kernel, values in token_cost.table_lines(columns)]
    return out


def render_markdown(columns: list[D4Column], lang: str = "en") -> str:
    rows = table_rows(columns, lang)
    rows = [rows[0], *with_shown_names(rows[1:], 2)]  # whole kernel names stay in d4.csv
    # every cell and note escaped: kernel names, labels and file names come from the user's files
    lines = [_TEXT[lang]["title"], "", markdown_row(rows[0]), "|" + "---|" * len(rows[0])]
    lines += [markdown_row(row) for row in rows[1:]]
    notes = []
    for c in columns:
        note = (
            f"{c.name}: stage {c.stage}, {c.stat} over {c.steps_used} steps"
            f" ({c.steps_skipped} skipped), ranks {len(c.ranks)}"
            + (f" of {len(c.ranks) + len(c.failed_files)}" if c.failed_files else "") + f" ({c.rank_policy})"
        )
        if c.layer_counts:
            note += f"; {c.layer_counts}"
        if c.sources:
            note += "; kernels named by " + ", ".join(
                f"{source} {pct:.0f}%" for source, pct in sorted(c.sources.items(), key=lambda kv: -kv[1]))
        if c.straggler is not None:
            note += f", rank spread {c.rank_spread_pct:.1f}% (slowest {c.straggler})"
        notes.append(note)
        if c.steps_mismatched:
            notes.append(f"{c.name}: LAYER COUNT MISMATCH in {c.steps_mismatched} of {c.steps_used} steps "
                         f"(see steps.csv and problems.csv); the table shows what was found (--strict leaves such steps out)")
        if c.signature_evidence.startswith("unverified"):
            notes.append(f"{c.name}: signature {c.signature}: {c.signature_evidence}: its rows are the signature's "
                         "names, checked on no real trace")
        notes += [f"{c.name}: NOT ANALYSED, left out of the table: {failed}" for failed in c.failed_files]
        if c.load is not None:
            notes.append(load_compare.note(c))
        if c.checks:
            notes.append(f"{c.name}: {c.checks}")
        if c.measured_shape is not None:
            notes.append(measured_shape.note(c))
        if c.sol is not None:
            notes.append(_TEXT[lang]["sol_note"].format(name=c.name, what=c.sol.describe()))
        notes += derived_notes.sol_notes(c)
        load_note = derived_notes.expert_load_note(c)
        if load_note:
            notes.append(load_note)
    notes += token_cost.notes(columns)

    return "\n".join(lines + [""] + [f"- {markdown_text(n)}" for n in notes] + markdown_sections(columns)
                     + step_time.markdown_section(columns)) + "\n"


def write_table_csv(path, columns: list[D4Column], lang: str = "en") -> None:
    """The table of the columns as CSV (d4.csv, compare.csv): the rows of table_rows."""
    import csv

    from analysis.io.atomic_files import write_atomically

    write_atomically(path, lambda fh: csv.writer(fh).writerows(table_rows(columns, lang)), binary=False)
