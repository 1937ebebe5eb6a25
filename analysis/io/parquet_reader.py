"""Read a flat Parquet table into one list per column, standard library only.

Why: `report`, `view`, `compare` and `export` read the per-kernel table `analyze` writes
(analysis/io/parquet_writer.py), and none of them should need pyarrow for it. This reads what
that writer writes and the common shapes of other writers' flat tables (a table re-saved by pandas
or pyarrow): format 1 data pages, PLAIN and dictionary encodings, required or optional columns,
uncompressed or GZIP pages. Anything else (nested columns, SNAPPY or ZSTD pages, data page v2) is a
ParquetError saying so, never a wrong value.

Bounded by limit_bytes, whatever the file declares: a few bytes can declare a billion values (one
run of the RLE / bit-packing hybrid), a page can inflate a thousandfold, so every count is checked
before anything is built from it. Each page inflates to at most limit_bytes and all pages together
too; a table holds at most limit_bytes / VALUE_SLOT_BYTES values (rows times columns, and every
dictionary's values), which the footer shows before a page is read; a page holds no more values
than its column chunk has left (and one at least, so the pages read are no more than the values), a
run no more than its page; the footer nests at most thrift_compact.MOST_NESTING deep.
"""
from __future__ import annotations

import sys
import zlib
from array import array

from analysis.errors import AnalysisError, shown_path
from analysis.io.input_files import InputFileError, read_input
from analysis.io import thrift_compact as tc

MAGIC = b"PAR1"
_INT32, _INT64, _FLOAT, _DOUBLE, _BYTE_ARRAY = 1, 2, 4, 5, 6
_REQUIRED, _OPTIONAL = 0, 1
_PLAIN, _PLAIN_DICTIONARY, _RLE, _RLE_DICTIONARY = 0, 2, 3, 8
_UNCOMPRESSED, _GZIP = 0, 2
_DATA_PAGE, _DICTIONARY_PAGE = 0, 2
_CODECS = {1: "SNAPPY", 3: "LZO", 4: "BROTLI", 5: "LZ4", 6: "ZSTD", 7: "LZ4_RAW"}
_FIXED = {_INT32: "i", _INT64: "q", _FLOAT: "f", _DOUBLE: "d"}
_KINDS = {_INT32: "int64", _INT64: "int64", _FLOAT: "float64", _DOUBLE: "float64", _BYTE_ARRAY: "string"}
_PACKED = {8: "B", 16: "H", 32: "I"}
VALUE_SLOT_BYTES = 8  # a value read takes a list slot (a pointer) at least: values held <= limit_bytes / 8
_STRING_PREFIX_BYTES = 4  # a PLAIN string's length before its bytes


class ParquetError(ValueError):
    """Not a Parquet table this reader can read; the message says what was found."""


class ParquetTable:
    """Columns by name (lists; None where an optional column has no value), their kinds (string,
    int64, float64) in file order, the row count and the footer's key / value metadata."""

    def __init__(self, columns: dict[str, list], kinds: dict[str, str], rows: int, metadata: dict[str, str]):
        self.columns, self.kinds, self.rows, self.metadata = columns, kinds, rows, metadata


class _Budget:
    """What one table may still inflate (bytes) and decode (values), shared by all its pages."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes, self.bytes_left = limit_bytes, limit_bytes
        self.most_values = self.values_left = limit_bytes // VALUE_SLOT_BYTES

    def inflate(self, size: int) -> None:
        self.bytes_left -= size
        if self.bytes_left < 0:
            raise ParquetError(f"pages that inflate to more than {self.limit_bytes} bytes, the most this reads")

    def decode(self, count: int) -> None:
        self.values_left -= count
        if self.values_left < 0:
            raise ParquetError(f"more than the {self.most_values} values this reads")


def _fixed(body: bytes, code: str, count: int) -> list:
    size = array(code).itemsize * count
    if len(body) < size:
        raise ParquetError(f"a page holds {len(body)} bytes, too few for {count} values")
    values = array(code, body[:size])
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


def _plain(body: bytes, physical: int, count: int) -> list:
    if physical in _FIXED:
        return _fixed(body, _FIXED[physical], count)
    if count * _STRING_PREFIX_BYTES > len(body):
        raise ParquetError(f"a page holds {len(body)} bytes, too few for {count} strings")
    out, pos = [], 0
    for _ in range(count):
        size = int.from_bytes(body[pos:pos + 4], "little")
        end = pos + 4 + size
        if end > len(body):
            raise ParquetError("a string runs past the end of its page")
        out.append(body[pos + 4:end].decode("utf-8"))
        pos = end
    return out


def _hybrid(body: bytes, pos: int, width: int, count: int) -> list[int]:
    """`count` values of the RLE / bit-packing hybrid at `pos`, `width` bits each. No run may hold
    more values than the page has left (a bit-packed one: its last group of eight padded)."""
    if not 0 <= width <= 32:
        raise ParquetError(f"bit width {width}")
    out: list[int] = []
    value_bytes = (width + 7) // 8
    reader = tc._Reader(body, pos)
    while len(out) < count:
        header, left = reader.varint(), count - len(out)
        if header & 1:  # bit-packed: groups of eight values
            groups = header >> 1
            if groups * 8 >= left + 8:
                raise ParquetError(f"a bit-packed run of {groups * 8} values where its page has {left} left")
            start, end = reader.pos, reader.pos + groups * width
            if end > len(body) or groups == 0:
                raise ParquetError("a bit-packed run past the end of its page")
            chunk = body[start:end]
            if width in _PACKED:
                out += _fixed(chunk, _PACKED[width], groups * 8)
            elif width == 0:
                out += [0] * (groups * 8)
            else:
                mask = (1 << width) - 1
                for g in range(groups):
                    bits = int.from_bytes(chunk[g * width:(g + 1) * width], "little")
                    out += [(bits >> (i * width)) & mask for i in range(8)]
            reader.pos = end
        else:  # a run of one repeated value
            run = header >> 1
            if not 0 < run <= left:
                raise ParquetError(f"a run of {run} values where its page has {left} left")
            if reader.pos + value_bytes > len(body):
                raise ParquetError("a run past the end of its page")
            value = int.from_bytes(body[reader.pos:reader.pos + value_bytes], "little")
            reader.pos += value_bytes
            out += [value] * run
    return out[:count]


def _inflate(data: bytes, codec: int, size: int) -> bytes:
    if codec == _UNCOMPRESSED:
        body = data
    elif codec == _GZIP:
        inflater = zlib.decompressobj(47)  # gzip or zlib container
        try:  # one byte more than the header says, to see it is more (max_length 0 would mean no limit)
            body = inflater.decompress(data, size + 1)
        except zlib.error as exc:
            raise ParquetError(f"a GZIP page does not inflate: {exc}") from None
        if len(body) > size:
            raise ParquetError(f"a page inflates to more than the {size} bytes its header gives")
    else:
        raise ParquetError(f"pages compressed with {_CODECS.get(codec, f'codec {codec}')}, which this reader does "
                           "not read (it reads uncompressed and GZIP pages)")
    if len(body) != size:
        raise ParquetError(f"a page inflates to {len(body)} bytes, its header says {size}")
    return body


def _column(data: bytes, meta: dict, physical: int, optional: bool, rows: int, budget: _Budget) -> list:
    """The values of one column chunk of a row group of `rows` rows."""
    codec, count = meta.get(4, 0), meta.get(5, 0)
    pos = meta.get(11) or meta.get(9)
    if not isinstance(pos, int) or not 0 <= pos < len(data) or not isinstance(count, int) or count < 0:
        raise ParquetError("a column chunk's offsets or value count are not in the file")
    if count != rows:  # a flat column has a value (or an empty cell) per row
        raise ParquetError(f"a column chunk of {count} values in a row group of {rows} rows")
    dictionary: list | None = None
    values: list = []
    while len(values) < count:
        header, pos = tc.read_struct(data, pos)
        page_type, size, packed = header.get(1), header.get(2, -1), header.get(3, -1)
        if not (isinstance(packed, int) and isinstance(size, int) and 0 <= packed <= len(data) - pos
                and 0 <= size <= budget.limit_bytes):
            raise ParquetError(f"a page of {packed} bytes ({size} inflated) does not fit the file")
        budget.inflate(size)
        body = _inflate(data[pos:pos + packed], codec, size)
        pos += packed
        if page_type == _DICTIONARY_PAGE:
            if dictionary is not None or values:
                raise ParquetError("a second dictionary page in a column chunk" if dictionary is not None
                                   else "a dictionary page after data pages")
            detail = header.get(7) or {}
            if detail.get(2, _PLAIN) not in (_PLAIN, _PLAIN_DICTIONARY):
                raise ParquetError(f"a dictionary page in encoding {detail.get(2)}")
            entries = detail.get(1, 0)
            if not isinstance(entries, int) or entries < 0:
                raise ParquetError(f"a dictionary page of {entries} values")
            budget.decode(entries)
            dictionary = _plain(body, physical, entries)
            continue
        if page_type != _DATA_PAGE:
            raise ParquetError(f"page type {page_type} (this reader reads format 1 data pages)")
        detail = header.get(5) or {}
        page_values, encoding = detail.get(1, 0), detail.get(2)
        if not isinstance(page_values, int) or not 0 < page_values <= count - len(values):  # pages read <= values
            raise ParquetError(f"a page of {page_values} values where its column chunk has {count - len(values)} left")
        offset = 0
        present = None
        if optional:  # definition levels: 4-byte length, then the hybrid at width 1
            length = int.from_bytes(body[:4], "little")
            present = _hybrid(body[:4 + length], 4, 1, page_values)
            offset = 4 + length
        defined = page_values if present is None else sum(present)
        if encoding == _PLAIN:
            got = _plain(body[offset:], physical, defined)
        elif encoding in (_PLAIN_DICTIONARY, _RLE_DICTIONARY):
            if dictionary is None:
                raise ParquetError("dictionary indices before any dictionary page")
            if defined and not dictionary:
                raise ParquetError(f"a page of {defined} dictionary indices into an empty dictionary")
            if defined and offset >= len(body):
                raise ParquetError(f"a dictionary-encoded page of {defined} values without the bit width of its "
                                   "indices")
            indices = _hybrid(body, offset + 1, body[offset], defined) if defined else []
            try:
                got = list(map(dictionary.__getitem__, indices))
            except IndexError:
                raise ParquetError("a dictionary index past the dictionary's end") from None
        else:
            raise ParquetError(f"values in encoding {encoding} (this reader reads PLAIN and dictionary encodings)")
        if present is not None:
            filled = iter(got)
            got = [next(filled) if p else None for p in present]
        values += got
    if len(values) != count:
        raise ParquetError(f"a column chunk holds {len(values)} values, its footer says {count}")
    return values


def _structs(value) -> list[dict]:
    """A footer's list of structs (an absent one: no items)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ParquetError("unreadable footer: a field of the wrong type (not a list of structs)")
    return value


def read_parquet(data: bytes, limit_bytes: int) -> ParquetTable:
    """The table in `data` (a whole Parquet file); limit_bytes bounds what its pages inflate to and,
    a VALUE_SLOT_BYTES each, the values it holds."""
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise ParquetError("not a Parquet file (no PAR1 at its start and end)")
    size = int.from_bytes(data[-8:-4], "little")
    if size > len(data) - 12:
        raise ParquetError("its footer is longer than the file")
    try:
        footer, _ = tc.read_struct(data, len(data) - 8 - size)
        schema, rows, groups = _structs(footer.get(2)), footer.get(3, 0), _structs(footer.get(4))
        leaves = schema[1:]
        if not schema or any(5 in leaf and leaf[5] for leaf in leaves) or len(leaves) != schema[0].get(5, 0):
            raise ParquetError("not a flat table (nested columns)")
        names = [leaf.get(4, b"").decode("utf-8", "replace") for leaf in leaves]
        physical = [leaf.get(1) for leaf in leaves]
        repetition = [leaf.get(3, _REQUIRED) for leaf in leaves]
        bad = [n for n, t, r in zip(names, physical, repetition) if t not in _KINDS or r not in (_REQUIRED, _OPTIONAL)]
        if bad:
            raise ParquetError(f"column(s) {', '.join(bad)} of a type or repetition this reader does not read")
        group_rows = [group.get(3) for group in groups]
        if not isinstance(rows, int) or any(not isinstance(n, int) or n < 0 for n in group_rows) \
                or sum(group_rows) != rows:
            raise ParquetError(f"row groups of {sum(n for n in group_rows if isinstance(n, int))} rows, "
                               f"its footer says {rows}")
        budget = _Budget(limit_bytes)
        if rows * max(len(names), 1) > budget.most_values:  # before any page: a column's values are its rows
            raise ParquetError(f"{rows} rows of {len(names)} columns, more than the {budget.most_values} values "
                               "this reads")
        columns: dict[str, list] = {name: [] for name in names}
        for group, in_group in zip(groups, group_rows):
            chunks = _structs(group.get(1))
            if len(chunks) != len(names):
                raise ParquetError(f"a row group of {len(chunks)} columns, the schema has {len(names)}")
            for name, kind, rep, chunk in zip(names, physical, repetition, chunks):
                budget.decode(in_group)
                columns[name] += _column(data, chunk.get(3) or {}, kind, rep == _OPTIONAL, in_group, budget)
        metadata = {kv.get(1, b"").decode("utf-8", "replace"): kv.get(2, b"").decode("utf-8", "replace")
                    for kv in _structs(footer.get(5))}
    except tc.ThriftError as exc:
        raise ParquetError(f"unreadable footer or page header: {exc}") from None
    except (AttributeError, TypeError):  # a footer field of another type than Parquet gives it
        raise ParquetError("unreadable footer: fields of the wrong types") from None
    except UnicodeDecodeError as exc:
        raise ParquetError(f"a string that is not UTF-8 ({exc.reason})") from None
    if any(len(values) != rows for values in columns.values()):
        raise ParquetError(f"columns of other lengths than the {rows} rows its footer gives")
    return ParquetTable(columns, {n: _KINDS[t] for n, t in zip(names, physical)}, rows, metadata)


def read_parquet_file(path, limit_bytes: int) -> ParquetTable:
    """The table in a Parquet file of at most limit_bytes; AnalysisError naming the file otherwise."""
    try:
        return read_parquet(read_input(path, limit_bytes, "a Parquet table"), limit_bytes)
    except InputFileError as exc:
        raise AnalysisError(str(exc)) from None
    except ParquetError as exc:
        raise AnalysisError(f"{shown_path(path)}: not a table this version reads: {exc}") from None
