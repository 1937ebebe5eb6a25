"""d4_detail.csv: the D4 table in long form, one row per (group, module, kernel), with each column
statistic of the statistics file beside the chosen one. Its columns are made here from the D4 row
and the statistics file; the export schema (harness/exports/columns.yaml) takes the statistics'
columns from the same file."""
from __future__ import annotations

import csv
from typing import TextIO

from analysis.tables.d4_cells import COLUMN_STATS

HEADER = ["column", "group", "module", "kernel", "layers", "value_us", *(f"{name}_us" for name in COLUMN_STATS),
          "exposed_us"]


def write_detail(fh: TextIO, column) -> None:
    """The column's kernel, MTP and two-batch-overlap rows as d4_detail.csv (microseconds to 3 decimals)."""
    out = csv.writer(fh)
    out.writerow(HEADER)
    for r in [*column.rows, *column.mtp_rows, *column.tbo_rows]:
        out.writerow([column.name, r.group, r.module, r.kernel, f"{r.layers:g}", f"{r.value_us:.3f}",
                      *(f"{r.stats_us[name]:.3f}" for name in COLUMN_STATS), f"{r.exposed_us:.3f}"])
