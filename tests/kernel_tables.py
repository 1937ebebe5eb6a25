"""Kernel tables in tests: an analysis folder turned into one written before the Parquet table.

Why: analyses written before kernels_long.parquet hold kernels_long.csv, and every reader must still
read them; this writes that CSV exactly as the analysis wrote it then (the csv module, one column per
KernelRow field, None as an empty cell) in place of a folder's Parquet table.
"""
from __future__ import annotations

import csv
from pathlib import Path

from analysis.pipeline import KERNEL_TABLE

from analysis.tables.kernel_table import read_kernel_rows
from analysis.attribution.rows import KernelRow


def write_older_csv(path: Path, rows: list[KernelRow]) -> None:
    fields = list(KernelRow.__struct_fields__)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(fields)
        for row in rows:
            out.writerow([getattr(row, f) if getattr(row, f) is not None else "" for f in fields])


def as_older_analysis(folder: Path) -> Path:
    """Replace the folder's kernels_long.parquet by the kernels_long.csv an older analysis wrote."""
    table = Path(folder) / KERNEL_TABLE
    older = table.with_name("kernels_long.csv")
    write_older_csv(older, read_kernel_rows(table))
    table.unlink()
    return older
