"""Parquet column chunks encoded from numpy columns: the same pages parquet_writer makes from lists.

Why: the kernel table of a large trace is hundreds of thousands of rows; from Python lists each value
is hashed into the column's dictionary and looked up again (parquet_writer._Chunk). A column the
attribution holds as codes into a small table (analysis/attribution/kernel_columns.py) gets its
dictionary and its indices from array operations instead. Each chunk is byte for byte the one
_Chunk makes from the column's values: the dictionary in the order values first appear, indices
bit-packed at 8, 16 or 32 bits (tests/test_kernel_columns.py).
"""
from __future__ import annotations

from analysis.io import thrift_compact as tc
from analysis.io.parquet_writer import (
    _DATA_PAGE, _DICTIONARY_PAGE, _PLAIN, _RLE_DICTIONARY, FLOAT64, INT32, INT64, STRING, _Chunk, _plain_strings,
)
from analysis.numeric import np

_INDEX_DTYPES = ((8, "<u1"), (16, "<u2"), (32, "<u4"))
_FIXED_DTYPES = {INT64: "<i8", INT32: "<i4"}
_DENSE_RANGE = 1 << 16  # integer columns spanning at most this many values are coded by offset, not sorted


def _new_chunk(name: str, kind: str, rows: int) -> _Chunk:
    chunk = _Chunk.__new__(_Chunk)
    chunk.name, chunk.kind, chunk.rows, chunk.uncompressed, chunk.pages = name, kind, rows, 0, []
    return chunk


def float_chunk(name: str, values) -> _Chunk:
    """A required FLOAT64 column (PLAIN)."""
    chunk = _new_chunk(name, FLOAT64, len(values))
    chunk._page(_DATA_PAGE, np.ascontiguousarray(values, dtype="<f8").tobytes(), _PLAIN)
    return chunk


def coded_chunk(name: str, kind: str, codes, table: list) -> _Chunk:
    """A required STRING or integer column given as `codes` (an int array, < 2**31 rows) into `table`
    (distinct values)."""
    rows = len(codes)
    chunk = _new_chunk(name, kind, rows)
    if not rows:
        chunk._page(_DATA_PAGE, b"", _PLAIN)
        return chunk
    first = np.full(len(table), rows, dtype=np.int64)
    first[codes[::-1]] = np.arange(rows - 1, -1, -1, dtype=np.int32)  # the last write wins: each code's first row
    present = np.flatnonzero(first < rows)
    order = present[np.argsort(first[present], kind="stable")]  # codes in the order their values first appear
    distinct = [table[i] for i in order.tolist()]
    plain = (_plain_strings(distinct) if kind == STRING
             else np.asarray(distinct, dtype=_FIXED_DTYPES[kind]).tobytes())
    chunk._page(_DICTIONARY_PAGE, plain, _PLAIN, len(distinct))
    width, dtype = next((w, d) for w, d in _INDEX_DTYPES if len(distinct) <= 1 << w)
    groups = (rows + 7) // 8
    packed = np.zeros(groups * 8, dtype=dtype)
    if len(distinct) > 1:
        position = np.empty(len(table), dtype=dtype)
        position[order] = np.arange(len(order))
        packed[:rows] = position[codes]
    header = bytearray([width])
    tc._varint((groups << 1) | 1, header)
    chunk._page(_DATA_PAGE, bytes(header) + packed.tobytes(), _RLE_DICTIONARY)
    return chunk


def int_chunk(name: str, kind: str, values) -> _Chunk:
    """A required integer column (dictionary-encoded, as _Chunk encodes integers)."""
    values = np.asarray(values, dtype=np.int64)
    if not len(values):
        return coded_chunk(name, kind, values, [])
    low, high = int(values.min()), int(values.max())
    if high - low < _DENSE_RANGE:
        return coded_chunk(name, kind, (values - low).astype(np.int32), range(low, high + 1))
    table, codes = np.unique(values, return_inverse=True)
    return coded_chunk(name, kind, codes, table.tolist())

