"""Thrift's compact protocol, the encoding of a Parquet file's footer and page headers.

Why here: the per-kernel table is written as Parquet without pyarrow (analysis/io/parquet_writer.py
says why), and Parquet describes its pages and its schema in this protocol. Only what Parquet uses:
structs, lists, i16/i32/i64 (zigzag varints), binary and booleans. A struct is written from a list
of (field id, type, value) and read back as {field id: value}, unknown fields included, so a reader
skips what it does not know as the protocol intends. Reading is bounded by the bytes: no container
deeper than MOST_NESTING, no list or map of more items than the bytes left could hold.
"""
from __future__ import annotations

BOOL, I8, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
_FALSE = 2  # a boolean field's type nibble when false (BOOL means true)
# structs, lists and maps inside one another: a Parquet footer nests at most about eight deep (a row
# group's column chunk's statistics); deeper is not a footer, and unbounded it would exhaust the stack
MOST_NESTING = 32


class ThriftError(ValueError):
    """Bytes that are not a compact-protocol struct (cut short, or of an unknown type)."""


# ---------------------------------------------------------------- writing


def _varint(value: int, out: bytearray) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _value(kind: int, value, out: bytearray) -> None:
    if kind in (I16, I32, I64):
        _varint(_zigzag(value), out)
    elif kind == BINARY:
        data = value.encode() if isinstance(value, str) else value
        _varint(len(data), out)
        out += data
    elif kind == STRUCT:
        write_struct(value, out)
    elif kind == LIST:
        element, items = value
        if len(items) < 15:
            out.append((len(items) << 4) | element)
        else:
            out.append(0xF0 | element)
            _varint(len(items), out)
        for item in items:
            _value(element, item, out)
    elif kind == I8:
        out.append(value & 0xFF)
    else:
        raise ThriftError(f"type {kind} is not written")


def write_struct(fields: list[tuple[int, int, object]], out: bytearray) -> bytearray:
    """Append a struct: fields (id, type, value) in rising id order; a value None is left out.
    LIST values are (element type, items); STRUCT values are field lists again."""
    last = 0
    for field_id, kind, value in fields:
        if value is None:
            continue
        nibble = (BOOL if value else _FALSE) if kind == BOOL else kind
        delta = field_id - last
        if 0 < delta <= 15:
            out.append((delta << 4) | nibble)
        else:
            out.append(nibble)
            _varint(_zigzag(field_id), out)
        last = field_id
        if kind != BOOL:
            _value(kind, value, out)
    out.append(0)
    return out


def struct_bytes(fields: list[tuple[int, int, object]]) -> bytes:
    return bytes(write_struct(fields, bytearray()))


# ---------------------------------------------------------------- reading


class _Reader:
    def __init__(self, data: bytes | memoryview, pos: int = 0):
        self.data, self.pos = data, pos

    def byte(self) -> int:
        try:
            value = self.data[self.pos]
        except IndexError:
            raise ThriftError("cut short") from None
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ThriftError("a varint longer than 10 bytes")

    def signed(self) -> int:
        raw = self.varint()
        return (raw >> 1) ^ -(raw & 1)

    def left(self) -> int:
        return len(self.data) - self.pos

    def check_items(self, size: int, least_bytes: int, what: str) -> None:
        """A container of `size` items, each of at least `least_bytes`, fits in the bytes left."""
        if size * least_bytes > self.left():
            raise ThriftError(f"a {what} of {size} items in {self.left()} bytes")

    def value(self, kind: int, depth: int):
        """A value of this type; depth: the structs, lists and maps around it."""
        if kind in (I16, I32, I64):
            return self.signed()
        if kind == BINARY:
            size = self.varint()
            end = self.pos + size
            if end > len(self.data):
                raise ThriftError("a string runs past the end")
            data = bytes(self.data[self.pos:end])
            self.pos = end
            return data
        if kind == STRUCT:
            return self.struct(depth)
        if kind in (LIST, SET):
            _check_depth(depth)
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            self.check_items(size, 1, "list")
            if element in (BOOL, _FALSE):
                return [self.byte() == BOOL for _ in range(size)]
            return [self.value(element, depth + 1) for _ in range(size)]
        if kind == MAP:
            _check_depth(depth)
            size = self.varint()
            if not size:
                return {}
            self.check_items(size, 2, "map")
            types = self.byte()
            if types >> 4 not in _KEYS:
                raise ThriftError(f"a map keyed by type {types >> 4}")
            return {self.value(types >> 4, depth + 1): self.value(types & 0x0F, depth + 1) for _ in range(size)}
        if kind == I8:
            return self.byte()
        if kind == DOUBLE:
            self.pos += 8
            if self.pos > len(self.data):
                raise ThriftError("cut short")
            return None
        raise ThriftError(f"unknown type {kind}")

    def struct(self, depth: int = 0) -> dict[int, object]:
        _check_depth(depth)
        fields: dict[int, object] = {}
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            kind, delta = head & 0x0F, head >> 4
            field_id = last + delta if delta else self.signed()
            last = field_id
            if kind in (BOOL, _FALSE):
                fields[field_id] = kind == BOOL
            else:
                fields[field_id] = self.value(kind, depth + 1)


_KEYS = (I8, I16, I32, I64, BINARY)  # map keys that read as hashable values


def _check_depth(depth: int) -> None:
    if depth >= MOST_NESTING:
        raise ThriftError(f"nested more than {MOST_NESTING} deep")


def read_struct(data: bytes | memoryview, pos: int = 0) -> tuple[dict[int, object], int]:
    """A struct read from data at pos, and the position after it. Raises ThriftError."""
    reader = _Reader(data, pos)
    return reader.struct(), reader.pos
