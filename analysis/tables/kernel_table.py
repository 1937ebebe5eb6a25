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

from analysis.attribution.rows import KernelRow
from analysis.errors import AnalysisError, shown_path
from analysis.io.input_files import TABLE_LIMIT_BYTES
from analysis.tables.kernel_rows_csv import read_kernel_rows_csv
from analysis.io.parquet_reader import ParquetTable, read_parquet_file
from analysis.io.parquet_writer import FLOAT64, INT64, STRING, RowGroup, encode_row_groups, write_row_groups

KERNEL_TABLE = "kernels_long.parquet"
OLDER_KERNEL_TABLE = "kernels_long.csv"  # what analyses wrote before the Parquet table
KERNEL_TABLES = (KERNEL_TABLE, OLDER_KERNEL_TABLE)  # in the order they are looked for
_KINDS = {str: STRING, int: INT64, float: FLOAT64}
COLUMNS = [(field.name, _KINDS[field.type]) for field in msgspec.structs.fields(KernelRow)]  # in field order
_DEFAULTS = {field.name: field.default for field in msgspec.structs.fields(KernelRow) if not field.required}


METADATA = {"table": "kernels_long", "row_type": "KernelRow"}


def write_kernel_table(out: BinaryIO, rows: list[KernelRow], encoded: list[RowGroup] | None = None) -> int:
    """The rows as kernels_long.parquet into a file opened for binary writing; the bytes written.
    `encoded`: the same rows already encoded (encode_kernel_table, in the ranks' worker processes),
    written as they are."""
    groups = encode_row_groups(rows, COLUMNS) if encoded is None else encoded
    return write_row_groups(out, groups, COLUMNS, METADATA)


def encode_kernel_table(rows: list[KernelRow]) -> list[RowGroup]:
    """One rank's rows as the kernel table's row groups: a worker encodes them beside the other
    ranks' workers, and the parent writes the groups of every rank in rank order."""
    return list(encode_row_groups(rows, COLUMNS))


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
