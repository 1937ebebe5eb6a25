"""The per-kernel table (KernelRows) on disk: kernels_long.parquet, written and read back.

Why Parquet: the table has one row per kernel launch, hundreds of thousands for a large trace, and
each row repeats a demangled kernel name of up to several hundred characters and a handful of short
labels. As CSV it was about a quarter of the trace's size and the slowest part of `analyze --out`;
as Parquet every repeated string is stored once per row group and the file is about 1/100 of the
CSV (docs/exports.md, docs/performance.md). Columns are KernelRow's fields in order, one Parquet
type each (string, int64, float64); pandas, polars, DuckDB and pyarrow read it.

Analyses written before this (kernels_long.csv) are still read (analysis/tables/kernel_rows_csv.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import msgspec

from analysis.attribution.kernel_columns import LABELS, KernelColumns
from analysis.attribution.rows import KernelRow
from analysis.errors import AnalysisError, shown_path
from analysis.io.input_files import TABLE_LIMIT_BYTES
from analysis.tables.kernel_rows_csv import read_kernel_rows_csv
from analysis.io.parquet_reader import ParquetTable, read_parquet_file
from analysis.io.parquet_writer import (
    FLOAT64, INT64, ROW_GROUP_ROWS, STRING, RowGroup, encode_row_groups, write_row_groups,
)


KERNEL_TABLE = "kernels_long.parquet"
OLDER_KERNEL_TABLE = "kernels_long.csv"  # what analyses wrote before the Parquet table
KERNEL_TABLES = (KERNEL_TABLE, OLDER_KERNEL_TABLE)  # in the order they are looked for
_KINDS = {str: STRING, int: INT64, float: FLOAT64}
COLUMNS = [(field.name, _KINDS[field.type]) for field in msgspec.structs.fields(KernelRow)]  # in field order
_DEFAULTS = {field.name: field.default for field in msgspec.structs.fields(KernelRow) if not field.required}


METADATA = {"table": "kernels_long", "row_type": "KernelRow"}
_CODED = {"stage": ("stage", "stages"), "kernel_name": ("name", "names"), "stream": ("stream", "streams")}  # in KernelColumns


def write_kernel_table(out: BinaryIO, rows: list[KernelRow], encoded: list[RowGroup] | None = None) -> int:
    """The rows as kernels_long.parquet into a file opened for binary writing; the bytes written.
    `encoded`: the same rows already encoded (encode_kernel_columns, in the ranks' worker processes),
    written as they are."""
    groups = encode_row_groups(rows, COLUMNS) if encoded is None else encoded
    return write_row_groups(out, groups, COLUMNS, METADATA)


def kernel_table_in(folder: str | Path) -> Path | None:
    """The kernel table of an analysis folder (the Parquet one, else an older analysis's CSV), or None."""
    for name in KERNEL_TABLES:
        path = Path(folder) / name
        if path.is_file():
            return path
    return None


def read_kernel_rows(path: str | Path) -> list[KernelRow]:
    """The KernelRows of a kernels_long.parquet, or of an older analysis's kernels_long.csv."""
    path = Path(path)
    if path.suffix == ".csv":
        return read_kernel_rows_csv(path)
    return rows_of_table(read_parquet_file(path, TABLE_LIMIT_BYTES), shown_path(path))


def rows_of_table(table: ParquetTable, where: str) -> list[KernelRow]:
    """A kernel table's rows; AnalysisError naming `where` when it is not one."""
    columns = []
    for name, kind in COLUMNS:
        values = table.columns.get(name)
        if values is None and name in _DEFAULTS:
            values = [_DEFAULTS[name]] * table.rows
        elif values is None or table.kinds[name] != kind:
            found = "missing" if values is None else f"of type {table.kinds[name]}"
            raise AnalysisError(f"{where}: not a kernel table: column {name} is {found}, not {kind} "
                                f"({KERNEL_TABLE} has KernelRow's columns: docs/exports.md)")
        elif table.rows and None in values:
            raise AnalysisError(f"{where}: column {name} has empty cells (row {values.index(None) + 1})")
        columns.append(values)
    return list(map(KernelRow, *columns))


def encode_kernel_columns(columns: KernelColumns) -> list[RowGroup]:
    """A rank's kernel rows held as columns, as the kernel table's row groups: the bytes the list
    writer (encode_row_groups) makes of the same rows (analysis/io/parquet_columns.py)."""
    from analysis.io.parquet_columns import coded_chunk, float_chunk, int_chunk  # numpy: kernel_columns.py says why
    from analysis.numeric import np

    rows = len(columns)
    labels = {field: columns.label(field) for field in LABELS}  # (distinct values, each slot's index)
    groups = []
    for first in range(0, rows, ROW_GROUP_ROWS):
        end = min(rows, first + ROW_GROUP_ROWS)
        part = slice(first, end)
        chunks = []
        for name, kind in COLUMNS:
            if name in ("run", "rank"):
                chunks.append(coded_chunk(name, kind, np.zeros(end - first, np.int32), [getattr(columns, name)]))
            elif name in _CODED:
                codes, table = _CODED[name]
                chunks.append(coded_chunk(name, kind, getattr(columns, codes)[part], getattr(columns, table)))
            elif name in labels:
                values, of_slot = labels[name]
                chunks.append(coded_chunk(name, kind, of_slot[columns.slot[part]], values))
            elif kind == FLOAT64:
                chunks.append(float_chunk(name, getattr(columns, name)[part]))
            else:
                chunks.append(int_chunk(name, kind, getattr(columns, name)[part]))
        groups.append(RowGroup(end - first, chunks))
    return groups
