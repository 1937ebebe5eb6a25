"""Rank workers' kernel rows kept as the kernel table's encoded row groups, decoded when first read.

Why: with several ranks, each rank's worker encodes its rows as the kernel table's row groups
(rank_digest.py) and makes every other table's share from them. Sending the rows back as well cost
each 100 MB rank about 0.05 s in its worker and 0.03 s in the parent (8 ranks on 2 cores: about
0.7 s of CPU, docs/performance.md), and `analyze` on the command line reads none of them: its tables
come from the digests and the kernel table is written from the groups. The rows are decoded from
the groups on first use, the same rows `report` reads back from kernels_long.parquet (every column
is stored exactly: strings, integers, doubles); their count is known without decoding.
"""
from __future__ import annotations

import io
from collections.abc import Iterator, Sequence

from analysis.attribution.rows import KernelRow
from analysis.io.input_files import TABLE_LIMIT_BYTES
from analysis.tables.kernel_table import COLUMNS, METADATA, rows_of_table
from analysis.io.parquet_reader import read_parquet
from analysis.io.parquet_writer import RowGroup, write_row_groups


class EncodedRows(Sequence):
    """KernelRows held as encoded row groups (in row order) until something reads them."""

    def __init__(self, groups: list[RowGroup], count: int):
        self.groups, self.count = groups, count
        self._rows: list[KernelRow] | None = None

    def rows(self) -> list[KernelRow]:
        """The rows, decoded once."""
        if self._rows is None:
            buffer = io.BytesIO()
            write_row_groups(buffer, self.groups, COLUMNS, METADATA)
            self._rows = rows_of_table(read_parquet(buffer.getvalue(), TABLE_LIMIT_BYTES), "a rank worker's kernel rows")
        return self._rows

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        return self.rows()[index]

    def __iter__(self) -> Iterator[KernelRow]:
        return iter(self.rows())

    def __eq__(self, other) -> bool:
        if isinstance(other, EncodedRows):
            other = other.rows()
        return self.rows() == other if isinstance(other, list) else NotImplemented

    __hash__ = None  # a mutable-looking sequence, as a list is

    def __reduce__(self):  # to another process (a run's node result), as the plain list it stands for
        return list, (self.rows(),)
