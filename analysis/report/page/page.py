"""The page of `moe-harness view`: one self-contained HTML file, inline SVG, no script, no network.

Sections: the run and its self-check verdict, per-layer bars, one step as a timeline (to scale, then
squeezed), where each rank's step goes, the wait / transfer heat map and the stragglers, the expert
load (the pictures first: a user looks before reading), what changed against the runs it is
compared with, the D4 table, links to the files. The per-rank and straggler tables are the CLI's
(d4.md's), from the same functions, so the page and the terminal never disagree. English and Chinese are both on the page; two radio buttons and CSS
show one (so the page needs no script, and a browser shows no console error).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.attribution.comm_split import split_collectives
from analysis.attribution.rows import KernelRow, StepRow
from analysis.report.page.comm_heatmap import heat_cells, heatmap_svg
from analysis.report.page.expert_load_bars import expert_load_svg
from analysis.report.page.layer_bars import layer_bars, layer_bars_svg
from analysis.report.page.scaled_timeline import scaled_timeline_svg
from analysis.report.page.step_timeline import GAP_PX, GAP_US, TARGET_PX, module_legend, pick_step, timeline_svg
from analysis.report.page.stream_coverage import EXPOSED, IDLE, OVERLAP
from analysis.report.page.style import LANGS, Style, load_style
from analysis.report.page.svg import bilingual, el, esc
from analysis.tables.comm_table import straggler_table, used_steps
from analysis.tables.step_time import rank_table
from analysis.tables.d4 import D4Column, table_rows
from analysis.tables.shown_names import with_shown_names
from analysis.tables.d4_diff import Changes, change_table, labels, rule_text, summary_text

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d1d1d;background:#fff}
main{max-width:1700px;margin:0 auto;padding:8px 20px 40px}
.lang-switch{position:sticky;top:0;background:#f4f4f4;padding:6px 20px;border-bottom:1px solid #ddd;z-index:2}
.lang-radio{position:absolute;opacity:0}.lang-switch label{margin-left:12px;cursor:pointer;text-decoration:underline}
#lang-en:checked~.lang-switch label[for=lang-en],#lang-zh:checked~.lang-switch label[for=lang-zh]{font-weight:700;text-decoration:none}
#lang-en:checked~.lang-switch .zh,#lang-zh:checked~.lang-switch .en{display:none}
#lang-en:checked~main .zh,#lang-zh:checked~main .en{display:none}
h1{font-size:22px;margin:14px 0 6px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #e3e3e3}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
td,th{border:1px solid #d6d6d6;padding:2px 7px;text-align:left;white-space:nowrap}th{background:#f1f1f1}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.sum td{background:#fafafa;font-weight:600}tr.line td{background:#eef3f8;font-weight:600}
tr.changed td.verdict{color:#b30000;font-weight:700}tr.within_noise td.verdict{color:#2e7d32}
.verdict-pass{color:#2e7d32;font-weight:600}.verdict-fail{color:#b30000;font-weight:700}
.scroll{overflow-x:auto;border:1px solid #eee;padding:4px}
svg text{font-size:11px;fill:#333}.panel-title,.heat-title{font-weight:700;font-size:12px}
.lane-bg{fill:#f7f7f7}.lane-label{font-size:11px}.gap{fill:#e6e6e6}.gap-label{font-size:9px;fill:#777}
.layer-line{stroke:#222;stroke-dasharray:3 2;stroke-width:1}.layer-label{font-size:10px;font-weight:600}
.axis{stroke:#888}.tick{fill:#555}.heat-text{font-size:10.5px}.heat-text.dark{fill:#fff}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:6px 0}
.swatch{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
.note{color:#555;font-size:13px}
.layers-span{fill:#222}.layers-span-label{font-size:11px;font-weight:600}
h3{font-size:14px;margin:16px 0 6px}
"""


@dataclass
class PageInputs:
    columns: list[D4Column]  # the run first, then the runs it is compared with
    kernel_rows: list[KernelRow] | None = None  # the run's kernels (None: not at hand)
    step_rows: list[StepRow] | None = None
    changes: list[Changes] = field(default_factory=list)  # each compared run against the first
    links: list[tuple[str, str]] = field(default_factory=list)  # (label, href relative to the page)
    notes: list[str] = field(default_factory=list)
    kernels_from: str = ""
    no_kernels_why: str = ""
    lang: str = "en"  # the language shown first
    rank: str | None = None  # the timeline's rank and step (default: a typical step of the first rank)
    step: int | None = None


def _used(column: D4Column, step_rows: list[StepRow]) -> set[tuple[str, int]]:
    """The steps the column was built from (strict: the column counted no mismatch, yet the steps have one)."""
    mismatch = any(s.stage == column.stage and s.status == "layer_count_mismatch" for s in step_rows)
    return used_steps(step_rows, column.stage, strict=mismatch and column.steps_mismatched == 0)


def _is_number(text: str) -> bool:
    return text.removesuffix("ms").lstrip("+-").replace(".", "", 1).isdigit()


def _table(rows: list[list[str]], lang: str, css: str, row_class=lambda row: None, last_class: str | None = None) -> str:
    """An HTML table (header first); numbers right-aligned, the last column classed `last_class`."""
    head = "".join(el("th", esc(h)) for h in rows[0])

    def cells(row: list[str]) -> str:
        return "".join(el("td", esc(c), class_=last_class if i == len(row) - 1 and last_class else
                          ("num" if _is_number(c) else None)) for i, c in enumerate(row))

    body = "".join(el("tr", cells(row), class_=row_class(row)) for row in rows[1:])
    return el("table", el("thead", el("tr", head)) + el("tbody", body), class_=f"{css} {lang}")


def _d4_tables(columns: list[D4Column]) -> str:
    def kind(row: list[str]) -> str | None:
        if not row[1] and not row[2]:
            return "line"
        return "sum" if row[1] == "sum" else None

    def shown(rows: list[list[str]]) -> list[list[str]]:  # whole kernel names shortened as d4.md shows them
        return [rows[0], *with_shown_names(rows[1:], 2)]

    return "".join(_table(shown(table_rows(columns, lang)), lang, "d4", kind) for lang in LANGS)


def _summary(column: D4Column, style: Style) -> str:
    facts = (f"stage {column.stage}, {column.stat} over {column.steps_used} steps, {len(column.ranks)} rank(s) "
             f"({column.rank_policy}), {column.num_layers:g} layers, step {column.step_ms:.2f} ms, "
             f"signature {column.signature or '-'}" + (f", model {column.model}" if column.model else ""))
    if column.checks:
        verdict = el("span", esc(column.checks), class_="verdict-fail" if column.failed_checks else "verdict-pass")
    else:
        verdict = bilingual(style, "no_checks")
    return (el("p", el("b", bilingual(style, "summary")) + ": " + esc(facts), class_="run-facts")
            + el("p", el("b", bilingual(style, "verdict")) + ": " + verdict, class_="self-checks"))


def _changes(changes: Changes) -> str:
    out = []
    for lang in LANGS:
        headers, rows = change_table(changes, lang)
        verdict_of = {getattr(labels(lang), v): v for v in ("changed", "within_noise", "no_spread")}

        def row_class(row: list[str]) -> str:
            return verdict_of.get(row[-1], "")

        table = _table([headers, *rows], lang, "changes", row_class, last_class="verdict")
        out.append(el("div", el("h3", esc(labels(lang).title.format(base=changes.base, other=changes.other)))
                      + el("p", esc(rule_text(changes, lang)), class_="note") + el("div", table, class_="scroll")
                      + el("p", esc(summary_text(changes, lang))), class_=lang))
    return "".join(out)


def _coverage_legend(style: Style) -> str:
    items = "".join(el("span", el("span", "", class_="swatch", style=f"background:{style.timeline_colour(kind)}")
                           + bilingual(style, kind), class_="legend-item", data_kind=kind)
                    for kind in (EXPOSED, OVERLAP, IDLE))
    return el("div", items, class_="legend coverage-legend")


def _cli_table(rows: list[list[str]], css: str, style: Style) -> str:
    """A table the CLI prints (its rows as the CLI formats them), headings in the page's languages."""
    return "".join(_table([[style.heading(lang, h) for h in rows[0]], *rows[1:]], lang, css) for lang in LANGS)


def _rank_steps(columns: list[D4Column], style: Style) -> str:
    """Per rank, where its step goes: step_time.rank_table, the table under d4.md."""
    return "".join(el("h2", bilingual(style, "rank_steps", name=c.name))
                   + el("div", _cli_table(table, "rank-steps", style), class_="scroll")
                   for c in columns if (table := rank_table(c)))


def _stragglers(columns: list[D4Column], style: Style) -> str:
    """The rank the others wait for: comm_table.straggler_table, the table under d4.md."""
    out = []
    for c in columns:
        table = straggler_table(c)
        if table:
            out.append(el("h3", bilingual(style, "stragglers", name=c.name))
                       + el("div", _cli_table(table, "stragglers", style), class_="scroll"))
        elif len(c.ranks) > 1:
            out.append(el("p", bilingual(style, "no_stragglers", name=c.name), class_="note no-stragglers"))
    return "".join(out)


def _kernel_sections(inputs: PageInputs, column: D4Column, style: Style) -> str:
    if not inputs.kernel_rows or not inputs.step_rows:
        return el("p", bilingual(style, "no_kernels", why=inputs.no_kernels_why or "-"), class_="note")
    used = _used(column, inputs.step_rows)
    out = [el("p", bilingual(style, "kernels_from", source=inputs.kernels_from), class_="note")]
    bars = layer_bars(inputs.kernel_rows, used)
    out.append(el("h2", bilingual(style, "layers")) + el("div", layer_bars_svg(bars, style), class_="scroll"))
    step = pick_step(inputs.step_rows, used, inputs.rank, inputs.step)
    step_rows = [r for r in inputs.kernel_rows if r.rank == step.rank and r.step == step.step]
    out.append(el("h2", bilingual(style, "timeline", stage=step.stage, rank=step.rank, step=step.step,
                                  step_us=step.step_us))
               + el("p", bilingual(style, "timeline_scale", width_px=TARGET_PX, us_per_px=step.step_us / TARGET_PX,
                                   gap_us=GAP_US), class_="note")
               + el("div", scaled_timeline_svg(step_rows, step, style), class_="scroll")
               + _coverage_legend(style) + module_legend(step_rows, style)
               + el("h3", bilingual(style, "timeline_squeezed"))
               + el("p", bilingual(style, "timeline_gaps", gap_us=GAP_US, gap_px=GAP_PX), class_="note")
               + el("div", timeline_svg(step_rows, step, style), class_="scroll"))
    out.append(_rank_steps(inputs.columns, style))
    cells = heat_cells(split_collectives(inputs.kernel_rows, inputs.step_rows), used, column.stage)
    out.append(el("h2", bilingual(style, "comm")))
    if cells:
        out.append(el("p", bilingual(style, "comm_straggler"), class_="note")
                   + el("div", heatmap_svg(cells, style), class_="scroll") + _stragglers(inputs.columns, style))
    else:
        why = "one_rank" if len({s.rank for s in inputs.step_rows}) < 2 else "no_collectives"
        out.append(el("p", "".join(el("span", esc(style.word(lang, "no_comm", why=style.word(lang, why))), class_=lang)
                                   for lang in LANGS), class_="note no-comm"))
    return "".join(out)


def render_page(inputs: PageInputs, style: Style | None = None) -> str:
    style = style or load_style()
    column = inputs.columns[0]
    parts = [el("h1", bilingual(style, "title", run=column.name)), _summary(column, style),
             _kernel_sections(inputs, column, style), el("h2", bilingual(style, "expert_load"))]
    parts.append(el("div", expert_load_svg(column.expert_load, style), class_="scroll") if column.expert_load
                 and column.expert_load.layers else el("p", bilingual(style, "no_expert_load"), class_="note"))
    if inputs.changes:
        parts.append(el("h2", bilingual(style, "changes")) + "".join(_changes(c) for c in inputs.changes))
    parts.append(el("h2", bilingual(style, "d4")) + el("div", _d4_tables(inputs.columns), class_="scroll"))
    if inputs.links:
        items = "".join(el("li", el("a", esc(label), href=href, class_="file-link")) for label, href in inputs.links)
        parts.append(el("h2", bilingual(style, "files")) + el("ul", items))
    if inputs.notes:
        parts.append(el("h2", bilingual(style, "notes"))
                     + el("ul", "".join(el("li", esc(n), class_="note") for n in inputs.notes)))
    # the radio buttons are the body's children, so `:checked ~ main` reaches the page; their labels sit in the bar
    radios = "".join(f'<input type="radio" name="lang" id="lang-{lang}" class="lang-radio"'
                     f'{" checked" if lang == inputs.lang else ""}>' for lang in LANGS)
    names = "".join(el("label", "English" if lang == "en" else "中文", for_=f"lang-{lang}") for lang in LANGS)
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>{esc(column.name)}</title><style>{_CSS}</style></head><body>" + radios
            + el("div", bilingual(style, "language") + ": " + names, class_="lang-switch")
            + el("main", "".join(parts)) + "</body></html>\n")
