"""Hostile Parquet files, built byte by byte, for the bounds of analysis/io/parquet_reader.py.

Why by hand: the project's writer only writes well-formed tables, and a crafted or damaged
kernels_long.parquet costs what its few bytes declare: two billion values in 144 bytes, a
footer of lists nested a hundred thousand deep, a page that inflates to gigabytes, an empty
dictionary that pages index. Each case carries the refusal the reader must give (a fragment of its
message) and the limit to read it with, so a fuzz suite can draw many, seeded, and check each one.
Everything here is synthetic; `hostile_cases(seed)` gives the same bytes for the same seed.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

from analysis.io import thrift_compact as tc

MAGIC = b"PAR1"
MIB = 1 << 20
# The reader's bounds, restated rather than imported, so the cases build against any reader, one
# without these bounds included (to see a test of them fail there).
TABLE_LIMIT_BYTES = 1024 * MIB  # what the commands read kernels_long.parquet with (analysis/io/input_files.py)
VALUE_SLOT_BYTES = 8  # the reader reads at most limit_bytes / 8 values (a list slot each)
MOST_NESTING = 32  # the deepest the reader follows a footer's structs, lists and maps

# Parquet's enums (parquet.thrift), the few these files use
INT64 = 2
REQUIRED, OPTIONAL = 0, 1
PLAIN, RLE, RLE_DICTIONARY = 0, 3, 8
UNCOMPRESSED, GZIP = 0, 2
DATA_PAGE, DICTIONARY_PAGE = 0, 2


@dataclass(frozen=True)
class HostileCase:
    name: str  # what is hostile about it, with its size: "rle_run values=2147483648"
    data: bytes  # the whole file
    refusal: str | None  # a fragment of the reader's error message (a regular expression); None: it reads
    limit_bytes: int = TABLE_LIMIT_BYTES  # read_parquet's limit to read it with


# ---------------------------------------------------------------- building blocks


def varint(value: int) -> bytes:
    out = bytearray()
    tc._varint(value, out)
    return bytes(out)


def gzip_bytes(body: bytes) -> bytes:
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)
    return packer.compress(body) + packer.flush()


def page(page_type: int, body: bytes, values: int, encoding: int = PLAIN, *, packed: bytes | None = None,
         inflated_bytes: int | None = None) -> bytes:
    """A page header and its body; `packed`: the body as stored (GZIP pages), `inflated_bytes`: what
    the header says it inflates to (the body's length unless told)."""
    stored = body if packed is None else packed
    if page_type == DATA_PAGE:
        detail = (5, tc.STRUCT, [(1, tc.I32, values), (2, tc.I32, encoding), (3, tc.I32, RLE), (4, tc.I32, RLE)])
    else:
        detail = (7, tc.STRUCT, [(1, tc.I32, values), (2, tc.I32, encoding)])
    size = len(body) if inflated_bytes is None else inflated_bytes
    return tc.struct_bytes([(1, tc.I32, page_type), (2, tc.I32, size), (3, tc.I32, len(stored)), detail]) + stored


def raw_field(field_id: int, kind: int, payload: bytes) -> bytes:
    """A struct field in the compact protocol's long form (type, then the id): fits after any field."""
    return bytes([kind]) + varint((field_id << 1) ^ (field_id >> 15)) + payload


def one_column_file(pages: list[bytes], values: int, *, rows: int | None = None, group_rows: int | None = None,
                    physical: int = INT64, optional: bool = False, codec: int = UNCOMPRESSED,
                    dictionary: bool = False, columns: int = 1, footer_tail: bytes = b"") -> bytes:
    """A Parquet file of one row group whose column chunk is `pages` (the first a dictionary page when
    `dictionary`); `values`: the chunk's value count, `rows` / `group_rows`: the footer's and the row
    group's row counts (both `values` unless told); `columns` 0: a schema and row group of no columns;
    `footer_tail`: raw fields appended to the footer's struct (after field 4)."""
    chunk = b"".join(pages)
    start = len(MAGIC)
    data_offset = start + (len(pages[0]) if dictionary and pages else 0)
    meta = [(1, tc.I32, physical), (2, tc.LIST, (tc.I32, [PLAIN, RLE, RLE_DICTIONARY])),
            (3, tc.LIST, (tc.BINARY, ["value"])), (4, tc.I32, codec), (5, tc.I64, values),
            (6, tc.I64, len(chunk)), (7, tc.I64, len(chunk)), (9, tc.I64, data_offset),
            (11, tc.I64, start if dictionary else None)]
    rows = values if rows is None else rows
    group_rows = rows if group_rows is None else group_rows
    schema = [[(4, tc.BINARY, "schema"), (5, tc.I32, columns)]]
    chunks = []
    if columns:
        schema.append([(1, tc.I32, physical), (3, tc.I32, OPTIONAL if optional else REQUIRED), (4, tc.BINARY, "value")])
        chunks.append([(2, tc.I64, start), (3, tc.STRUCT, meta)])
    group = [(1, tc.LIST, (tc.STRUCT, chunks)), (2, tc.I64, len(chunk)), (3, tc.I64, group_rows)]
    footer = tc.struct_bytes([(1, tc.I32, 1), (2, tc.LIST, (tc.STRUCT, schema)), (3, tc.I64, rows),
                              (4, tc.LIST, (tc.STRUCT, [group]))])
    footer = footer[:-1] + footer_tail + b"\x00"
    return MAGIC + chunk + footer + len(footer).to_bytes(4, "little") + MAGIC


def _one_int64_dictionary() -> bytes:
    return page(DICTIONARY_PAGE, (7).to_bytes(8, "little"), 1)


# ---------------------------------------------------------------- the hostile shapes

DECLARED_SHAPES = ("rle_run", "null_levels", "rows_without_columns", "page_beyond_chunk", "rle_beyond_page",
                   "bitpacked_beyond_page")


def declared_values(values: int, shape: str = "rle_run") -> HostileCase:
    """A file of about 140 bytes declaring `values` values, which the old reader built as lists.
    Declared by the footer (refused there when above the limit's values, limit_bytes / 8): rle_run,
    dictionary indices as one run; null_levels, an optional column whose definition levels are one
    run of nulls; rows_without_columns, a footer of `values` rows and no columns. Declared inside a
    chunk of 8 values: page_beyond_chunk, its page declares `values`; rle_beyond_page and
    bitpacked_beyond_page, its page of 8 holds a run of `values` (bit-packed: of width 0)."""
    name = f"{shape} values={values}"
    over_cap = f"more than the {TABLE_LIMIT_BYTES // VALUE_SLOT_BYTES} values"
    run = bytes([1]) + varint(values << 1) + b"\x00"  # indices: bit width 1, one run of index 0
    if shape == "rle_run":
        data = one_column_file([_one_int64_dictionary(), page(DATA_PAGE, run, values, RLE_DICTIONARY)], values,
                               dictionary=True)
        return HostileCase(name, data, over_cap)
    if shape == "null_levels":
        levels = varint(values << 1) + b"\x00"
        body = len(levels).to_bytes(4, "little") + levels
        return HostileCase(name, one_column_file([page(DATA_PAGE, body, values)], values, optional=True), over_cap)
    if shape == "rows_without_columns":
        return HostileCase(name, one_column_file([], 0, rows=values, columns=0), over_cap)
    if shape == "page_beyond_chunk":
        data = one_column_file([_one_int64_dictionary(), page(DATA_PAGE, run, values, RLE_DICTIONARY)], 8,
                               dictionary=True)
        return HostileCase(name, data, f"a page of {values} values where its column chunk has 8 left")
    if shape == "rle_beyond_page":
        data = one_column_file([_one_int64_dictionary(), page(DATA_PAGE, run, 8, RLE_DICTIONARY)], 8, dictionary=True)
        return HostileCase(name, data, f"a run of {values} values where its page has 8 left")
    if shape == "bitpacked_beyond_page":
        groups = (values + 7) // 8
        body = bytes([0]) + varint(groups << 1 | 1)  # bit width 0: the groups take no bytes
        data = one_column_file([_one_int64_dictionary(), page(DATA_PAGE, body, 8, RLE_DICTIONARY)], 8, dictionary=True)
        return HostileCase(name, data, f"a bit-packed run of {groups * 8} values where its page has 8 left")
    raise ValueError(f"unknown shape {shape!r}: one of {', '.join(DECLARED_SHAPES)}")


NESTINGS = ("list", "map", "struct", "list_of_structs")


def deep_footer(depth: int, nesting: str = "list") -> HostileCase:
    """A footer with an unknown field (which a reader skips, so reads) of `depth` containers inside
    one another; with the footer's own struct that is depth + 1, and the reader follows MOST_NESTING."""
    if depth < 1:
        raise ValueError("a depth of one container at least")
    if nesting == "list":  # lists of one list; the innermost an empty list of i32
        payload, kind = bytes([0x10 | tc.LIST]) * (depth - 1) + bytes([tc.I32]), tc.LIST
    elif nesting == "map":  # maps of one i32 key to a map; the innermost empty
        payload, kind = (b"\x01" + bytes([tc.I32 << 4 | tc.MAP]) + b"\x00") * (depth - 1) + b"\x00", tc.MAP
    elif nesting == "struct":  # structs whose field 1 is a struct; the innermost empty
        payload, kind = bytes([0x10 | tc.STRUCT]) * (depth - 1) + b"\x00" * depth, tc.STRUCT
    elif nesting == "list_of_structs":  # a list of one struct whose field 1 is such a list, and so on
        opened, closed = bytearray(), bytearray()
        for level in range(depth):
            last = level == depth - 1
            if level % 2 == 0:  # a list of one struct; the last one empty
                opened.append(tc.STRUCT if last else 0x10 | tc.STRUCT)
            elif last:  # an empty struct
                opened.append(0)
            else:  # a struct whose field 1 is a list, closed after it
                opened.append(0x10 | tc.LIST)
                closed.append(0)
        payload, kind = bytes(opened + closed), tc.LIST
    else:
        raise ValueError(f"unknown nesting {nesting!r}: one of {', '.join(NESTINGS)}")
    data = one_column_file([page(DATA_PAGE, (5).to_bytes(8, "little"), 1)], 1, footer_tail=raw_field(99, kind, payload))
    return HostileCase(f"deep_footer {nesting} depth={depth}", data, f"nested more than {MOST_NESTING} deep")


def long_footer_list(length: int, container: str = "list") -> HostileCase:
    """A footer field declaring a list (or map) of `length` items in the few bytes after it."""
    if container == "list":
        payload, kind = bytes([0xF0 | tc.I32]) + varint(length) + b"\x02\x04", tc.LIST
        refusal = f"a list of {length} items in"
    else:
        payload, kind = varint(length) + bytes([tc.I32 << 4 | tc.I32]) + b"\x02\x04", tc.MAP
        refusal = f"a map of {length} items in"
    data = one_column_file([page(DATA_PAGE, (5).to_bytes(8, "little"), 1)], 1, footer_tail=raw_field(99, kind, payload))
    return HostileCase(f"long_footer_{container} length={length}", data, refusal)


DICTIONARY_FLAWS = ("empty", "empty_with_indices", "second", "after_data", "negative_count", "index_past_end",
                    "no_bit_width")


def dictionary_flaw(flaw: str, values: int = 8) -> HostileCase:
    """A column of `values` dictionary-indexed values whose dictionary is wrong: empty (a page with no
    indices' bit width, or indices into no values), a second one, one after the data, a negative
    count, an index past its end, or a data page with no byte for the indices' bit width."""
    indices = bytes([1]) + varint(values << 1) + b"\x01"  # one run of index 1
    zeros = bytes([1]) + varint(values << 1) + b"\x00"  # one run of index 0
    one_value = _one_int64_dictionary()
    data_page = page(DATA_PAGE, zeros, values, RLE_DICTIONARY)
    if flaw == "empty":  # an empty dictionary page, then a data page with nothing in it
        pages = [page(DICTIONARY_PAGE, b"", 0), page(DATA_PAGE, b"", values, RLE_DICTIONARY)]
        refusal = f"a page of {values} dictionary indices into an empty dictionary"
    elif flaw == "empty_with_indices":
        pages = [page(DICTIONARY_PAGE, b"", 0), data_page]
        refusal = f"a page of {values} dictionary indices into an empty dictionary"
    elif flaw == "second":
        pages = [one_value, one_value, data_page]
        refusal = "a second dictionary page"
    elif flaw == "after_data":
        half = page(DATA_PAGE, bytes([1]) + varint((values // 2) << 1) + b"\x00", values // 2, RLE_DICTIONARY)
        pages = [one_value, half, one_value, half]
        refusal = "a second dictionary page"
    elif flaw == "negative_count":
        pages = [page(DICTIONARY_PAGE, (7).to_bytes(8, "little"), -3), data_page]
        refusal = "a dictionary page of -3 values"
    elif flaw == "index_past_end":
        pages = [one_value, page(DATA_PAGE, indices, values, RLE_DICTIONARY)]
        refusal = "a dictionary index past the dictionary's end"
    elif flaw == "no_bit_width":
        pages = [one_value, page(DATA_PAGE, b"", values, RLE_DICTIONARY)]
        refusal = "without the bit width of its indices"
    else:
        raise ValueError(f"unknown flaw {flaw!r}: one of {', '.join(DICTIONARY_FLAWS)}")
    return HostileCase(f"dictionary {flaw} values={values}", one_column_file(pages, values, dictionary=True), refusal)


def inflating_pages(pages: int, inflated_bytes: int, limit_bytes: int) -> HostileCase:
    """`pages` GZIP pages of one INT64 value each, each inflating to `inflated_bytes` (the value, then
    zeros): each page within `limit_bytes`, all of them together more when pages * inflated_bytes is."""
    body = (5).to_bytes(8, "little") + bytes(inflated_bytes - 8)
    one = page(DATA_PAGE, body, 1, packed=gzip_bytes(body))
    refusal = "pages that inflate to more than" if pages * inflated_bytes > limit_bytes else None
    return HostileCase(f"inflating_pages pages={pages} inflated_bytes={inflated_bytes}",
                       one_column_file([one] * pages, pages, codec=GZIP), refusal, limit_bytes)


def understated_page(inflated_bytes: int, stated_bytes: int = 0) -> HostileCase:
    """One GZIP page whose header says it inflates to `stated_bytes` while it inflates to `inflated_bytes`."""
    body = bytes(inflated_bytes)
    one = page(DATA_PAGE, body, 1, packed=gzip_bytes(body), inflated_bytes=stated_bytes)
    return HostileCase(f"understated_page inflated_bytes={inflated_bytes} stated={stated_bytes}",
                       one_column_file([one], 1, codec=GZIP), f"inflates to more than the {stated_bytes} bytes")


def empty_pages(pages: int) -> HostileCase:
    """A column chunk of one value after `pages` data pages of none: pages that read nothing, which
    several column chunks could point at again and again."""
    empty = page(DATA_PAGE, b"", 0)
    data = one_column_file([empty] * pages + [page(DATA_PAGE, (5).to_bytes(8, "little"), 1)], 1)
    return HostileCase(f"empty_pages pages={pages}", data, "a page of 0 values where its column chunk has 1 left")


def rows_unlike_values(rows: int, values: int, where: str = "footer") -> HostileCase:
    """A footer of `rows` rows whose row group holds a column chunk of `values` values, the row group
    saying `values` rows (`where` "footer") or `rows` ("group")."""
    group_rows = values if where == "footer" else rows
    data = one_column_file([page(DATA_PAGE, bytes(8 * values), values)], values, rows=rows, group_rows=group_rows)
    refusal = (f"row groups of {values} rows, its footer says {rows}" if where == "footer"
               else f"a column chunk of {values} values in a row group of {rows} rows")
    return HostileCase(f"rows_unlike_values {where} rows={rows} values={values}", data, refusal)


# ---------------------------------------------------------------- drawn at random, from a seed


def hostile_cases(seed: int, per_kind: int = 1) -> list[HostileCase]:
    """`per_kind` cases of every kind above, sizes, depths and counts drawn from `seed` (the same seed,
    the same bytes). Declared counts lie beyond the values a 1 GiB limit reads, depths at or beyond
    MOST_NESTING, gzip sizes stay small (a few MiB at most, built quickly)."""
    rng = random.Random(seed)
    most = TABLE_LIMIT_BYTES // VALUE_SLOT_BYTES
    cases = []
    for _ in range(per_kind):
        for shape in DECLARED_SHAPES:
            values = rng.choice([most + 1, rng.randrange(most + 1, 1 << 40), rng.randrange(1 << 40, 1 << 62)])
            cases.append(declared_values(values, shape))
        for nesting in NESTINGS:
            cases.append(deep_footer(rng.choice([MOST_NESTING, rng.randrange(MOST_NESTING, 100_000)]), nesting))
        for container in ("list", "map"):
            cases.append(long_footer_list(rng.randrange(1 << 10, 1 << 62), container))
        for flaw in DICTIONARY_FLAWS:
            cases.append(dictionary_flaw(flaw, rng.randrange(2, 40) * 2))
        inflated = rng.randrange(4, 64) * 1024
        pages = rng.randrange(3, 12)
        cases.append(inflating_pages(pages, inflated, limit_bytes=(pages - 1) * inflated))
        cases.append(understated_page(rng.randrange(1, 4) * MIB, rng.randrange(0, 64)))
        cases.append(empty_pages(rng.randrange(1, 1000)))
        values = rng.randrange(1, 50)
        for where in ("footer", "group"):
            cases.append(rows_unlike_values(values + rng.randrange(1, 1 << 20), values, where))
    return cases
