"""A rank's KernelRows sent from a worker process to the parent as columns.

Why: the parent of several rank workers gets every rank's rows pickled. Pickled row by row, each
KernelRow is a class reference and a tuple of 18 fields (about 0.08 s per 57,000 rows to pickle in
the worker); as one list per field the same values pickle in about half that, and read back into
equal rows at the same cost. Repeated strings stay shared: pickle writes an object it has seen
once, by reference, either way.
"""
from __future__ import annotations

import operator

from analysis.attribution.rows import KernelRow

_FIELDS = KernelRow.__struct_fields__


class RowColumns:
    """KernelRows as one list per field (picklable); take_rows() builds them again."""

    __slots__ = ("columns",)

    def __init__(self, rows: list[KernelRow]):
        self.columns = [list(map(operator.attrgetter(name), rows)) for name in _FIELDS]

    def __getstate__(self):
        return self.columns

    def __setstate__(self, columns):
        self.columns = columns

    def take_rows(self) -> list[KernelRow]:
        """The rows, built again; the columns are let go (the pool's future still holds this object
        until every rank is back: keeping them would hold every rank's columns beside its rows)."""
        columns, self.columns = self.columns, []
        return list(map(KernelRow, *columns))
