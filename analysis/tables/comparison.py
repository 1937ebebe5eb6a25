"""What `compare` shows and writes for D4 columns side by side: the tables (d4.py), a note where the
columns' layer counts differ, each column against the first (d4_diff.py), and the files compare.md,
compare.csv and changes.csv. One verb for the command, so the harness holds no table code."""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from analysis.io.atomic_files import write_atomically
from analysis.markdown_text import markdown_text
from analysis.tables.d4 import render_markdown, write_table_csv
from analysis.tables.d4_diff import diff_columns, render_changes_markdown

CHANGE_FIELDS = ("base", "other", "group", "module", "kernel", "base_us", "other_us", "diff_us", "base_sd_us",
                 "other_sd_us", "band_us", "effect_us", "verdict")


@dataclass
class Comparison:
    columns: list
    lang: str
    changes: list = field(default_factory=list)  # d4_diff's ColumnChanges, each column after the first
    markdown: str = ""  # compare.md: the table, its notes, then each column's changes
    warnings: list[str] = field(default_factory=list)  # what the command also says on stderr

    def write(self, folder: Path) -> list[str]:
        """compare.md, compare.csv and (with two columns or more) changes.csv in folder; their names."""
        write_atomically(Path(folder) / "compare.md", self.markdown)
        write_table_csv(Path(folder) / "compare.csv", self.columns, self.lang)
        names = ["compare.md", "compare.csv"]
        if self.changes:
            write_changes_csv(Path(folder) / "changes.csv", self.changes)
            names.append("changes.csv")
        return names


def compare_columns(columns: list, lang: str = "en", notes: list[str] | None = None, sol=None) -> Comparison:
    """The comparison of the columns, the first the base; notes are listed under the table. With
    `sol` (SolSettings), every column carries SOL columns for those settings (a saved column's own
    are made again; a column analysed with them is unchanged)."""
    if sol is not None:
        from analysis.tables.d4_sol import with_sol

        columns = [with_sol(column, sol) for column in columns]
    got = Comparison(columns=columns, lang=lang, changes=[diff_columns(columns[0], other) for other in columns[1:]])
    layer_note = layer_count_note(columns)
    if layer_note:
        got.warnings.append(layer_note[2:].strip())
    listed = ([layer_note[2:].strip()] if layer_note else []) + list(notes or [])  # names in them: escaped
    got.markdown = (render_markdown(columns, lang) + "".join(f"- {markdown_text(n)}\n" for n in listed)
                    + "".join("\n" + render_changes_markdown(changes, lang) for changes in got.changes))
    return got


def write_changes_csv(path: Path, all_changes: list) -> None:
    """changes.csv: one line per (comparison, row), the end-to-end line first with group `end-to-end` (its
    values in ms, its effect in us)."""

    def write(fh):
        out = csv.writer(fh)
        out.writerow(CHANGE_FIELDS)
        for changes in all_changes:
            step = changes.step
            for row, group in [(step, "end-to-end"), *((r, r.group) for r in changes.rows)]:
                out.writerow([changes.base, changes.other, group, row.module, row.kernel,
                              *("" if v is None else v for v in (row.base_us, row.other_us, row.diff_us, row.base_sd_us,
                                                                  row.other_sd_us, row.band_us, row.effect_us)),
                              row.verdict])

    write_atomically(path, write, binary=False)


def layer_count_note(columns) -> str:
    """A note when the columns' models have different layer counts: per-layer rows compare, the
    all-layers and end-to-end lines do not."""
    counts = {c.name: round(c.num_layers) for c in columns}
    if len(set(counts.values())) < 2:
        return ""
    return ("- LAYER COUNTS DIFFER: " + ", ".join(f"{name} {n:g}" for name, n in counts.items())
            + " layers per step; the per-layer rows compare, the all-layers and end-to-end lines do not\n")
