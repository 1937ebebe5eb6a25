"""A trace set's kernel rows as KernelRows only when something reads them.

Why: `analyze` builds every table from what each rank's columns give (analysis/pipeline/rank_digest.py)
and writes the kernel table from its encoded row groups; the command on its own reads no KernelRow.
Making them anyway cost a 400 MB decode trace about 0.12 CPU-s (226,000 objects; docs/performance.md).
So the rows stay as the ranks' columns (this process's ranks) or as the encoded kernel table (rank
workers' rows, which are not sent back, and a run's node's rows, which cross to the head so: the same
rows `report` reads from kernels_long.parquet, every column stored exactly), made into KernelRows on
first read; their count is known without it.
"""
from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence

from analysis.attribution.kernel_columns import KernelColumns
from analysis.attribution.rows import KernelRow
from analysis.io.input_files import TABLE_LIMIT_BYTES
from analysis.io.parquet_reader import read_parquet
from analysis.io.parquet_writer import RowGroup, write_row_groups
from analysis.tables.kernel_table import COLUMNS, METADATA, rows_of_table


class LazyRows(Sequence):
    """KernelRows made by `make` when first read; `count` of them."""

    def __init__(self, make: Callable[[], list[KernelRow]], count: int):
        self._make, self.count = make, count
        self._rows: list[KernelRow] | None = None
        self._groups: list[RowGroup] | None = None  # of_groups': what crosses to another process

    @classmethod
    def of_columns(cls, parts: list[KernelColumns]) -> LazyRows:
        """The rows of these ranks' columns, rank after rank."""
        return cls(lambda: [row for part in parts for row in part.rows()], sum(map(len, parts)))

    @classmethod
    def of_groups(cls, groups: list[RowGroup], count: int) -> LazyRows:
        """The rows held in the kernel table's encoded row groups (in row order)."""
        def decoded() -> list[KernelRow]:
            buffer = io.BytesIO()
            write_row_groups(buffer, groups, COLUMNS, METADATA)
            return rows_of_table(read_parquet(buffer.getvalue(), TABLE_LIMIT_BYTES), "a rank worker's kernel rows")
        out = cls(decoded, count)
        out._groups = groups
        return out

    @property
    def made(self) -> bool:
        """Whether something has read them (the rows were made)."""
        return self._rows is not None

    def rows(self) -> list[KernelRow]:
        """The rows, made once."""
        if self._rows is None:
            self._rows = self._make()
            self._make = None
        return self._rows

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        return self.rows()[index]

    def __iter__(self) -> Iterator[KernelRow]:
        return iter(self.rows())

    def __eq__(self, other) -> bool:
        if isinstance(other, LazyRows):
            other = other.rows()
        return self.rows() == other if isinstance(other, list) else NotImplemented

    __hash__ = None  # a mutable-looking sequence, as a list is

    def __reduce__(self):
        """To another process (a run's node result): rows not yet made from an encoded kernel table
        cross as that table (a 100 MB decode rank's: 0.22 MB against its rows' 3.8 MB pickled), made
        there when read; others as the plain list they stand for."""
        if self._rows is None and self._groups is not None:
            return LazyRows.of_groups, (self._groups, self.count)
        return list, (self.rows(),)
