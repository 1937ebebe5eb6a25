"""One rank's kernel table encoded, and its stream summary made, by a forked copy of the process
while the parent builds the other tables.

Why: once the rank is attributed its rows are in memory; encoding them as the kernel table's row
groups (about 0.4 s of a 400 MB trace) needs nothing the D4 column, the self-checks or the step time
make, and those need nothing from it. The child (analysis/forked_call.py) sends back only the
encoded groups and the per-stream sums (about 1 MB) while the parent builds the tables on the other
core (docs/performance.md). A child that could not deliver costs its time, never the table: the
parent then encodes the rows itself, to the same bytes.
"""
from __future__ import annotations

from analysis.attribution.overlap import StreamSummary, stream_summary
from analysis.attribution.rows import KernelRow
from analysis.forked_call import ForkedCall
from analysis.input_files import TABLE_LIMIT_BYTES
from analysis.tables.kernel_table import encode_kernel_table
from analysis.tables.parquet_writer import RowGroup


def _encoded(rows: list[KernelRow]) -> tuple[list[RowGroup], list[StreamSummary]]:
    return encode_kernel_table(rows), stream_summary(rows)


def _is_encoding(value) -> bool:
    """What _encoded returns: a list of row groups and a list of stream summaries."""
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], list)
            and all(isinstance(g, RowGroup) for g in value[0]) and isinstance(value[1], list)
            and all(isinstance(s, StreamSummary) for s in value[1]))


class ForkedEncoding(ForkedCall):
    """The rows' kernel table and stream summary, made in a forked child; `result()` waits for them."""

    def __init__(self, rows: list[KernelRow]):
        super().__init__(_encoded, (rows,), _is_encoding, TABLE_LIMIT_BYTES)
