"""What changed between two D4 columns, beyond the noise of their per-step spread.

Why: side-by-side columns do not say which differences are real; a row that moved 5% between two
runs may be the step-to-step scatter both runs already show. Each row (kernel rows, MTP rows,
wait / transfer rows) gets its difference, both runs' spread, its effect on the step and a verdict
by the rule in changes.yaml (docs/analysis.md, "What changed"). A row one run lacks counts as 0 us
in every step of that run (no spread), so a kernel that appears or vanishes is judged like any
other change.
"""
from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import msgspec

from analysis.io.data_files import read_packaged_struct
from analysis.errors import AnalysisError
from analysis.markdown_text import markdown_row, markdown_text
from analysis.tables.d4 import D4Column, group_label
from analysis.tables.shown_names import with_shown_names
from analysis.tables.d4_cells import D4Row

RULE_FILE = Path(__file__).with_name("changes.yaml")
CHANGED, WITHIN_NOISE, NO_SPREAD = "changed", "within_noise", "no_spread"  # verdicts (keys of the labels)


class NoiseRule(msgspec.Struct, forbid_unknown_fields=True):
    spread_multiple: float
    min_relative_change: float

    def __post_init__(self):
        if self.spread_multiple < 0 or not 0 <= self.min_relative_change < 1:
            raise ValueError("spread_multiple must be >= 0 and min_relative_change in [0, 1)")

    def band_us(self, a_us: float, b_us: float, a_sd_us: float, b_sd_us: float) -> float:
        """The largest difference that is still noise."""
        return max(self.spread_multiple * math.hypot(a_sd_us, b_sd_us),
                   self.min_relative_change * max(abs(a_us), abs(b_us)))


class _Labels(msgspec.Struct, forbid_unknown_fields=True):
    title: str
    rule: str
    group: str
    module: str
    kernel: str
    difference: str
    spread: str
    effect: str
    verdict: str
    end_to_end: str
    changed: str
    within_noise: str
    no_spread: str
    summary: str


class _ChangesFile(msgspec.Struct, forbid_unknown_fields=True):
    noise: NoiseRule
    labels: dict[str, _Labels]


@cache
def changes_config(path: Path = RULE_FILE) -> _ChangesFile:
    """The noise rule and the table's words, read once."""
    return read_packaged_struct(path, _ChangesFile)


class RowChange(msgspec.Struct):
    """One D4 row of `other` against `base` (us per layer; None: the run has no such row)."""

    group: str
    module: str
    kernel: str
    base_us: float | None
    other_us: float | None
    diff_us: float
    base_sd_us: float | None  # per-step spread (0 where the row is absent from a run that has spreads)
    other_sd_us: float | None
    band_us: float | None  # the noise band: |diff_us| above it is a change
    effect_us: float  # other_us x its layers - base_us x its layers: us per step
    verdict: str  # changed | within_noise | no_spread


class Changes(msgspec.Struct):
    base: str
    other: str
    step: RowChange  # end-to-end, in ms (effect_us in us)
    rows: list[RowChange]  # largest |effect on the step| first

    def count(self, verdict: str) -> int:
        return sum(1 for r in self.rows if r.verdict == verdict)


def _rows(column: D4Column) -> dict[tuple[str, str, str], D4Row]:
    out: dict[tuple[str, str, str], D4Row] = {}
    for row in [*column.rows, *column.mtp_rows, *column.comm_rows]:
        out.setdefault((row.group, row.module, row.kernel), row)
    return out


def has_spreads(column: D4Column) -> bool:
    """Whether the column recorded per-step spreads at all (an older analysis.json did not)."""
    return column.step_sd_ms is not None or any(r.step_sd_us is not None for r in _rows(column).values())


def _judge(a: float, b: float, a_sd: float | None, b_sd: float | None, rule: NoiseRule) -> tuple[float | None, str]:
    if a_sd is None or b_sd is None:
        return None, NO_SPREAD
    band = rule.band_us(a, b, a_sd, b_sd)
    return band, (CHANGED if abs(b - a) > band else WITHIN_NOISE)


def diff_columns(base: D4Column, other: D4Column, rule: NoiseRule | None = None) -> Changes:
    """Every row either column has, judged by the noise rule, largest effect on the step first."""
    rule = rule or changes_config().noise
    base_rows, other_rows = _rows(base), _rows(other)
    # a row a run lacks ran 0 us in every step of it: spread 0, if the run recorded spreads at all
    base_absent_sd = 0.0 if has_spreads(base) else None
    other_absent_sd = 0.0 if has_spreads(other) else None
    changes = []
    for key in dict.fromkeys([*base_rows, *other_rows]):
        a, b = base_rows.get(key), other_rows.get(key)
        a_us, b_us = (a.value_us if a else 0.0), (b.value_us if b else 0.0)
        a_sd = a.step_sd_us if a else base_absent_sd
        b_sd = b.step_sd_us if b else other_absent_sd
        band, verdict = _judge(a_us, b_us, a_sd, b_sd, rule)
        effect = (b_us * b.layers if b else 0.0) - (a_us * a.layers if a else 0.0)
        changes.append(RowChange(*key, base_us=a.value_us if a else None, other_us=b.value_us if b else None,
                                 diff_us=b_us - a_us, base_sd_us=a_sd, other_sd_us=b_sd, band_us=band,
                                 effect_us=effect, verdict=verdict))
    changes.sort(key=lambda c: -abs(c.effect_us))
    band, verdict = _judge(base.step_ms, other.step_ms, base.step_sd_ms, other.step_sd_ms, rule)
    step = RowChange("", "", "", base_us=base.step_ms, other_us=other.step_ms, diff_us=other.step_ms - base.step_ms,
                     base_sd_us=base.step_sd_ms, other_sd_us=other.step_sd_ms, band_us=band,
                     effect_us=1000 * (other.step_ms - base.step_ms), verdict=verdict)
    return Changes(base=base.name, other=other.name, step=step, rows=changes)


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _signed(value: float, digits: int = 1) -> str:
    return f"{value:+.{digits}f}"


def change_table(changes: Changes, lang: str = "en") -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the changes table (the end-to-end line first), shared by markdown and HTML."""
    words = labels(lang)
    headers = [words.group, words.module, words.kernel, changes.base, changes.other, words.difference,
               f"{words.spread} {changes.base}", f"{words.spread} {changes.other}", words.effect, words.verdict]
    s = changes.step
    rows = [[words.end_to_end, "", "", _num(s.base_us, 2), _num(s.other_us, 2), _signed(s.diff_us, 2),
             _num(s.base_sd_us, 2), _num(s.other_sd_us, 2), _signed(s.effect_us), getattr(words, s.verdict)]]
    for c in changes.rows:
        rows.append([group_label(c.group, lang), c.module, c.kernel, _num(c.base_us), _num(c.other_us), _signed(c.diff_us),
                     _num(c.base_sd_us, 2), _num(c.other_sd_us, 2), _signed(c.effect_us), getattr(words, c.verdict)])
    return headers, with_shown_names(rows, 2)  # shown only: compare's CSV keeps whole kernel names


def labels(lang: str) -> _Labels:
    table = changes_config().labels
    if lang not in table:
        raise AnalysisError(f"{RULE_FILE}: no labels for language {lang!r} (has {', '.join(table)})")
    return table[lang]


def rule_text(changes: Changes, lang: str = "en") -> str:
    rule = changes_config().noise
    return labels(lang).rule.format(base=changes.base, other=changes.other, multiple=rule.spread_multiple,
                                    relative=rule.min_relative_change)


def summary_text(changes: Changes, lang: str = "en") -> str:
    return labels(lang).summary.format(rows=len(changes.rows), changed=changes.count(CHANGED),
                                       noise=changes.count(WITHIN_NOISE), unknown=changes.count(NO_SPREAD))


def render_changes_markdown(changes: Changes, lang: str = "en") -> str:
    headers, rows = change_table(changes, lang)
    words = labels(lang)
    lines = [markdown_text(words.title.format(base=changes.base, other=changes.other)), "",
             markdown_text(rule_text(changes, lang)), "", markdown_row(headers), "|" + "---|" * len(headers)]
    lines += [markdown_row(row) for row in rows]
    return "\n".join([*lines, "", f"- {markdown_text(summary_text(changes, lang))}"]) + "\n"

