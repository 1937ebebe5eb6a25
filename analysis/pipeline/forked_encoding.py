"""One rank's kernel table encoded by a forked copy of the process while the parent builds the
other tables.

Why: once the rank is attributed its rows are in memory; encoding them as the kernel table's row
groups (about 0.3 s of a 400 MB trace) needs nothing the D4 column, the self-checks, the step time or
the stream summary make, and those need nothing from it. The child (analysis/forked_call.py) sends
back only the encoded groups (about 1 MB) while the parent builds the tables on the other core
(docs/performance.md). A child that could not deliver costs its time, never the table: the parent
then encodes the rows itself, to the same bytes.
"""
from __future__ import annotations

from analysis.attribution.rows import KernelRow
from analysis.forked_call import ForkedCall
from analysis.io.input_files import TABLE_LIMIT_BYTES
from analysis.tables.kernel_table import encode_kernel_table
from analysis.io.parquet_writer import RowGroup


def _encoded(rows: list[KernelRow]) -> list[RowGroup]:
    return encode_kernel_table(rows)


def _is_encoding(value) -> bool:
    """What _encoded returns: a list of row groups."""
    return isinstance(value, list) and all(isinstance(g, RowGroup) for g in value)


class ForkedEncoding(ForkedCall):
    """The rows' kernel table, encoded in a forked child; `result()` waits for it."""

    def __init__(self, rows: list[KernelRow]):
        super().__init__(_encoded, (rows,), _is_encoding, TABLE_LIMIT_BYTES)
