"""Write a table of rows (objects with one attribute per column) as a Parquet file, standard library only.

Why not pyarrow: the per-kernel table of a 400 MB trace has about 226,000 rows, which the csv module
wrote in about 1.8 s (94 MB, each row repeating a demangled kernel name of up to several hundred
characters). Parquet stores each repeated string once per row group (dictionary encoding), but
importing pyarrow to write it costs about 0.13 s and, in this process, about 75 MB of resident
memory for its libraries: more than the analysis of that trace holds (benchmarks/parquet_writers_bench.py
measures both; `export` writes with this one too). The subset written here is the one every Parquet
reader (pyarrow, pandas, polars, DuckDB, Spark) reads: required or optional (nullable) flat columns,
format 1 data pages, dictionary pages for strings and integers (RLE_DICTIONARY indices, bit-packed
at 8, 16 or 32 bits), PLAIN doubles, each page GZIP-compressed (zlib).

Columns are built one at a time from the rows, per row group, so memory grows by one column's values,
never by the table.
"""
from __future__ import annotations

import operator
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from analysis.io import thrift_compact as tc

MAGIC = b"PAR1"
STRING, INT64, INT32, FLOAT64 = "string", "int64", "int32", "float64"
NULLABLE = "?"  # a kind ending in it ("float64?") is an OPTIONAL column: None is a missing value
ROW_GROUP_ROWS = 1 << 18  # rows per row group: bounds the memory of one column's values
GZIP_LEVEL = 1  # measured: level 1 is most of level 6's size at a third of its time
CREATED_BY = "moe-harness (analysis/io/parquet_writer.py)"

# Parquet's enums (parquet.thrift)
_T_INT32, _T_INT64, _T_DOUBLE, _T_BYTE_ARRAY = 1, 2, 5, 6
_REQUIRED, _OPTIONAL = 0, 1
_CONVERTED_UTF8 = 0
_PLAIN, _RLE, _RLE_DICTIONARY = 0, 3, 8
_GZIP = 2
_DATA_PAGE, _DICTIONARY_PAGE = 0, 2
_PHYSICAL = {STRING: _T_BYTE_ARRAY, INT64: _T_INT64, INT32: _T_INT32, FLOAT64: _T_DOUBLE}
_FIXED_ARRAYS = {INT64: "q", INT32: "i"}
_INDEX_ARRAYS = ((8, "B"), (16, "H"), (32, "I"))  # bit width of the indices and the array type holding them


def _compress(data: bytes) -> bytes:
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: the gzip container Parquet's GZIP means
    return packer.compress(data) + packer.flush()


def _little_endian(values: array) -> bytes:
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def _plain_strings(values: list[str]) -> bytes:
    """PLAIN byte arrays: each value's UTF-8 length (4 bytes, little-endian), then its bytes."""
    out = bytearray()
    for value in values:
        data = value.encode("utf-8", "surrogatepass")
        out += len(data).to_bytes(4, "little")
        out += data
    return bytes(out)


def _indices(values: list, position: dict, distinct: int) -> bytes:
    """The values' dictionary indices (position: value -> index) as one bit-packed run of the RLE /
    bit-packing hybrid, after the byte that gives the bit width; the last group of eight is padded
    with zeros (the page says how many count). Indices of one byte are packed straight into bytes,
    and a column of one value needs no lookups at all (its indices are all 0)."""
    width, code = next((w, c) for w, c in _INDEX_ARRAYS if distinct <= 1 << w)
    groups = (len(values) + 7) // 8
    pad = groups * 8 - len(values)
    if distinct == 1:
        packed = bytes(groups * 8 * width // 8)
    elif width == 8:
        packed = bytes(map(position.__getitem__, values)) + bytes(pad)
    else:
        ids = array(code, list(map(position.__getitem__, values)))
        ids.extend(bytes(pad))
        packed = _little_endian(ids)
    header = bytearray([width])
    tc._varint((groups << 1) | 1, header)
    return bytes(header) + packed


def _defined_levels(values: list) -> bytes:
    """An OPTIONAL column's definition levels (1 present, 0 missing) as a data page v1 holds them: the
    byte length (4 bytes, little-endian), then one bit-packed run of the hybrid at bit width 1."""
    groups = (len(values) + 7) // 8
    bits = [value is not None for value in values] + [False] * (groups * 8 - len(values))
    packed = bytes(sum(bit << i for i, bit in enumerate(bits[g * 8:g * 8 + 8])) for g in range(groups))
    run = bytearray()
    tc._varint((groups << 1) | 1, run)
    run += packed
    return len(run).to_bytes(4, "little") + bytes(run)


class _Chunk:
    """One column of one row group: its pages, and what the footer says of them."""

    def __init__(self, name: str, kind: str, values: list):
        self.name, self.kind, self.rows = name, kind, len(values)
        base = kind.rstrip(NULLABLE)
        self.uncompressed = 0  # page headers and bodies before compression, as the footer counts them
        self.pages: list[tuple[int, bytes, bytes]] = []  # (page type, header, compressed body)
        levels = b""
        if kind.endswith(NULLABLE):
            levels = _defined_levels(values)
            values = [value for value in values if value is not None]
        if base == FLOAT64 or not values:
            plain = _little_endian(array("d", values)) if base == FLOAT64 else b""
            self._page(_DATA_PAGE, levels + plain, _PLAIN)
            return
        position = {value: i for i, value in enumerate(dict.fromkeys(values))}
        distinct = list(position)
        plain = _plain_strings(distinct) if base == STRING else _little_endian(array(_FIXED_ARRAYS[base], distinct))
        self._page(_DICTIONARY_PAGE, plain, _PLAIN, len(distinct))
        self._page(_DATA_PAGE, levels + _indices(values, position, len(distinct)), _RLE_DICTIONARY)

    def _page(self, page_type: int, body: bytes, encoding: int, dictionary_values: int = 0) -> None:
        packed = _compress(body)
        if page_type == _DATA_PAGE:  # num_values, encoding, definition and repetition level encodings
            detail = (5, tc.STRUCT, [(1, tc.I32, self.rows), (2, tc.I32, encoding), (3, tc.I32, _RLE), (4, tc.I32, _RLE)])
        else:
            detail = (7, tc.STRUCT, [(1, tc.I32, dictionary_values), (2, tc.I32, encoding)])
        header = tc.struct_bytes([(1, tc.I32, page_type), (2, tc.I32, len(body)), (3, tc.I32, len(packed)), detail])
        self.pages.append((page_type, header, packed))
        self.uncompressed += len(header) + len(body)

    def write(self, out: BinaryIO, offset: int) -> tuple[int, list]:
        """Write the pages at `offset`; (bytes written, the ColumnChunk struct for the footer)."""
        written = 0
        dictionary_offset = data_offset = None
        for page_type, header, body in self.pages:
            if page_type == _DICTIONARY_PAGE:
                dictionary_offset = offset + written
            else:
                data_offset = offset + written
            out.write(header)
            out.write(body)
            written += len(header) + len(body)
        encodings = [_PLAIN, _RLE] + ([_RLE_DICTIONARY] if dictionary_offset is not None else [])
        meta = [(1, tc.I32, _PHYSICAL[self.kind.rstrip(NULLABLE)]), (2, tc.LIST, (tc.I32, encodings)),
                (3, tc.LIST, (tc.BINARY, [self.name])), (4, tc.I32, _GZIP), (5, tc.I64, self.rows),
                (6, tc.I64, self.uncompressed), (7, tc.I64, written), (9, tc.I64, data_offset),
                (11, tc.I64, dictionary_offset)]
        return written, [(2, tc.I64, offset), (3, tc.STRUCT, meta)]


class RowGroup:
    """One row group, encoded: its column chunks' pages (bytes) and its row count. Picklable, so a
    rank's worker process can encode its own rows and the parent only writes the bytes."""

    __slots__ = ("rows", "chunks")

    def __init__(self, rows: int, chunks: list[_Chunk]):
        self.rows, self.chunks = rows, chunks

    def __getstate__(self):
        return self.rows, [(c.name, c.kind, c.rows, c.uncompressed, c.pages) for c in self.chunks]

    def __setstate__(self, state):
        self.rows, chunks = state
        self.chunks = []
        for name, kind, rows, uncompressed, pages in chunks:
            chunk = _Chunk.__new__(_Chunk)
            chunk.name, chunk.kind, chunk.rows, chunk.uncompressed, chunk.pages = name, kind, rows, uncompressed, pages
            self.chunks.append(chunk)


def encode_row_groups(rows: list, columns: list[tuple[str, str]]) -> Iterator[RowGroup]:
    """`rows` (objects with an attribute per column) as row groups of at most ROW_GROUP_ROWS rows,
    one at a time: memory grows by one row group's columns, never by the table."""
    for first in range(0, len(rows), ROW_GROUP_ROWS):  # no rows: no row group
        part = rows[first:first + ROW_GROUP_ROWS]
        yield RowGroup(len(part), [_Chunk(name, kind, list(map(operator.attrgetter(name), part)))
                                   for name, kind in columns])


def encode_columns(values: dict[str, list], columns: list[tuple[str, str]]) -> Iterator[RowGroup]:
    """A table held as columns ({name: its values}, all of one length) as row groups of at most
    ROW_GROUP_ROWS rows."""
    rows = len(values[columns[0][0]]) if columns else 0
    if any(len(values[name]) != rows for name, _ in columns):
        raise ValueError("columns of different lengths")
    for first in range(0, rows, ROW_GROUP_ROWS):
        end = min(rows, first + ROW_GROUP_ROWS)
        yield RowGroup(end - first, [_Chunk(name, kind, values[name][first:end]) for name, kind in columns])


def write_columns(out: BinaryIO, values: dict[str, list], columns: list[tuple[str, str]], metadata: dict[str, str]) -> int:
    """Write a table held as columns (encode_columns) as Parquet into `out`; the bytes written."""
    return write_row_groups(out, encode_columns(values, columns), columns, metadata)


def write_row_groups(out: BinaryIO, groups: Iterable[RowGroup], columns: list[tuple[str, str]],
                     metadata: dict[str, str]) -> int:
    """Write row groups encoded with these columns (encode_row_groups, here or in another process) as
    one Parquet file, in the order given; returns the bytes written."""
    out.write(MAGIC)
    offset = len(MAGIC)
    footer_groups, total_rows = [], 0
    for group in groups:
        if [(c.name, c.kind) for c in group.chunks] != list(columns):
            raise ValueError("a row group encoded with other columns than the file's")
        chunks, group_bytes = [], 0
        for chunk in group.chunks:
            written, column = chunk.write(out, offset)
            offset += written
            group_bytes += chunk.uncompressed
            chunks.append(column)
        footer_groups.append([(1, tc.LIST, (tc.STRUCT, chunks)), (2, tc.I64, group_bytes), (3, tc.I64, group.rows)])
        total_rows += group.rows
    schema = [[(4, tc.BINARY, "schema"), (5, tc.I32, len(columns))]]
    for name, kind in columns:
        base, repetition = kind.rstrip(NULLABLE), _OPTIONAL if kind.endswith(NULLABLE) else _REQUIRED
        schema.append([(1, tc.I32, _PHYSICAL[base]), (3, tc.I32, repetition), (4, tc.BINARY, name),
                       (6, tc.I32, _CONVERTED_UTF8 if base == STRING else None),
                       (10, tc.STRUCT, [(1, tc.STRUCT, [])] if base == STRING else None)])
    footer = tc.struct_bytes([
        (1, tc.I32, 1), (2, tc.LIST, (tc.STRUCT, schema)), (3, tc.I64, total_rows),
        (4, tc.LIST, (tc.STRUCT, footer_groups)),
        (5, tc.LIST, (tc.STRUCT, [[(1, tc.BINARY, k), (2, tc.BINARY, v)] for k, v in metadata.items()])),
        (6, tc.BINARY, CREATED_BY)])
    out.write(footer)
    out.write(len(footer).to_bytes(4, "little"))
    out.write(MAGIC)
    return offset + len(footer) + 8
