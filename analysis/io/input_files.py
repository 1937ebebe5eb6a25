"""Opening an input file: a regular file up to a size limit, a pipe streamed up to it, nothing else.

Why: a path on the command line, in a scenario or in a run folder may name /dev/zero, a FIFO that no
program writes to, or a file of many gigabytes. Read whole, the first fills memory in seconds and the
second waits forever. Every input the tools read goes through `open_input`, which refuses folders,
devices and sockets at once, opens a FIFO without waiting for a writer (one without a writer reads as
empty), streams a pipe (`analyze <(zcat t.gz)`) while its writer keeps sending (one silent for
PIPE_IDLE_LIMIT_S is an error, never a hang), and stops reading past the limit its caller names;
`read_input_gzip` bounds what a .gz inflates to, `parsed_json` how deep a document nests.
The limits are below, each with what it bounds (docs/analysis.md, "Bounds", lists them).
tests/test_input_door.py walks analysis/ and harness/ for reads that go around this module.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import io
import os
import select
import stat
import time
import zlib
from collections.abc import Iterator

from analysis.errors import AnalysisError, shown_path

MIB = 1024 * 1024
# YAML and JSON settings: scenarios, signatures, models, hardware, rule files, output markers, expert load,
# a run's manifest.json and scenario.yaml (a manifest lists each file in about 150 bytes: 16 MiB is
# 100,000 files)
CONFIG_LIMIT_BYTES = 16 * MIB
# single JSON or text documents a command reads back: analysis.json, load/summary.json, an ncu export
DOCUMENT_LIMIT_BYTES = 256 * MIB
# tables read back row by row: kernels_long.csv, d4_detail.csv, steps.csv, load/requests.jsonl
TABLE_LIMIT_BYTES = 1024 * MIB
# a pipe or FIFO whose writer sends nothing for this long is given up on (a writer that stalled, or
# one that keeps the pipe open and never writes): an error, not a command that waits forever
PIPE_IDLE_LIMIT_S = 60.0
# levels a JSON document may nest (the files read hold 6 at most; the parser's stack stops near 1000,
# and code that walks a document recursively would fail well before that)
JSON_DEPTH_LIMIT = 64
_GZIP_BLOCK_BYTES = 256 * 1024  # compressed bytes inflated per step
_HASH_BLOCK_BYTES = 1024 * 1024  # bytes hashed per step


class InputFileError(AnalysisError):
    """An input that cannot be read as one: names the file and why."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = shown_path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):  # raised in a Ray actor, it travels pickled: rebuilt from what it holds
        return (type(self), (self.path, self.problem))


def _size_text(limit_bytes: int) -> str:
    return f"{limit_bytes // MIB} MiB" if limit_bytes >= MIB else f"{limit_bytes} bytes"


class _Bounded(io.RawIOBase):
    """A raw reader that raises InputFileError once more than limit_bytes came through; a pipe's
    (kept non-blocking) waits for its writer's next bytes at most PIPE_IDLE_LIMIT_S."""

    def __init__(self, fd: int, path, limit_bytes: int | None, what: str, pipe: bool = False):
        self._file = io.FileIO(fd, "rb", closefd=True)
        self._path, self._limit, self._what, self._pipe = path, limit_bytes, what, pipe
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        got = self._file.readinto(buffer) if not self._pipe else self._pipe_readinto(buffer)
        if got:
            self.bytes_read += got
            if self._limit is not None and self.bytes_read > self._limit:
                raise InputFileError(self._path, f"{self._what} larger than {_size_text(self._limit)}, the most "
                                                 "this reads (docs/analysis.md, bounds)")
        return got or 0

    def _pipe_readinto(self, buffer) -> int:
        """Bytes as they come; 0 once no writer holds the pipe open (or none ever did)."""
        idle_s = PIPE_IDLE_LIMIT_S
        deadline = time.monotonic() + idle_s
        while True:
            got = self._file.readinto(buffer)  # None: the writer is there but has sent nothing yet
            if got is not None:
                return got
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                raise InputFileError(self._path, f"nothing came through the pipe for {idle_s:g} s after "
                                                 f"{self.bytes_read} bytes: its writer stalled (docs/analysis.md, "
                                                 "bounds)")
            waiting = select.poll()  # poll, not select: any descriptor number
            waiting.register(self._file.fileno(), select.POLLIN)
            waiting.poll(left_s * 1000)

    def fileno(self) -> int:
        return self._file.fileno()

    def close(self) -> None:
        self._file.close()
        super().close()


def open_input(path: str | os.PathLike, limit_bytes: int | None, what: str = "the file") -> _Bounded:
    """The file opened for reading, unbuffered; limit_bytes None: no limit (trace files, whose loader
    bounds what it holds). Raises InputFileError for a missing file, a folder, a device or socket,
    or one over the limit (a regular file at once, by its size; a pipe once that much came through)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputFileError(path, "no such file") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot open: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputFileError(path, "is a folder, not a file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise InputFileError(path, "not a regular file or a pipe (a device or socket is never read)")
        if stat.S_ISREG(mode) and limit_bytes is not None and os.fstat(fd).st_size > limit_bytes:
            raise InputFileError(path, f"{what} is {os.fstat(fd).st_size} bytes, more than the "
                                       f"{_size_text(limit_bytes)} this reads (docs/analysis.md, bounds)")
        # opened without waiting for a FIFO's writer; a regular file's reads block from here, a pipe's
        # stay non-blocking and wait in poll() with a deadline (no writer: end of file at once)
        if stat.S_ISREG(mode):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return _Bounded(fd, path, limit_bytes, what, pipe=stat.S_ISFIFO(mode))


def read_input(path: str | os.PathLike, limit_bytes: int, what: str = "the file") -> bytes:
    """The whole file, at most limit_bytes (InputFileError past it)."""
    with open_input(path, limit_bytes, what) as raw:
        try:
            return io.BufferedReader(raw).read()
        except OSError as exc:
            raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None


def read_input_range(path: str | os.PathLike, offset: int, size_bytes: int, what: str = "the file") -> bytes:
    """At most size_bytes of a regular file from offset: a file shipped in pieces is never held whole
    (a node's trace of gigabytes goes back to the driver this way)."""
    with open_input(path, None, what) as raw:
        if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
            raise InputFileError(path, f"{what} is a pipe: only a regular file is read in pieces")
        try:
            return os.pread(raw.fileno(), size_bytes, offset)
        except OSError as exc:
            raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None


def input_sha256(path: str | os.PathLike, limit_bytes: int | None = None, what: str = "the file") -> str:
    """The file's sha256 (hex), streamed through open_input in blocks: constant memory at any size."""
    digest = hashlib.sha256()
    with open_input(path, limit_bytes, what) as raw:
        reader = io.BufferedReader(raw, _HASH_BLOCK_BYTES)
        while block := _read_or_fail(reader, path, _HASH_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def read_input_gzip(path: str | os.PathLike, limit_bytes: int, inflated_limit_bytes: int,
                    what: str = "the file") -> bytearray:
    """The whole inflated content of a .gz (every member), at most limit_bytes read and
    inflated_limit_bytes inflated: a few MB of gzip can inflate to gigabytes, so the inflater never
    yields more than is left of the bound. Corrupt or cut gzip is an InputFileError too."""
    out = bytearray()
    inflater = zlib.decompressobj(31)
    member_open = False  # inside a member: its end (and trailer) not yet seen
    with open_input(path, limit_bytes, what) as raw:
        reader = io.BufferedReader(raw, _GZIP_BLOCK_BYTES)
        pending = b""
        while True:
            if not pending:
                pending = _read_or_fail(reader, path, _GZIP_BLOCK_BYTES)
                if not pending:
                    break
            if not member_open and not pending.strip(b"\0"):
                pending = b""  # zero padding after the last member (as tar and gzip -c leave it)
                continue
            member_open = True
            try:
                out += inflater.decompress(pending, inflated_limit_bytes + 1 - len(out))
            except zlib.error as exc:
                raise InputFileError(path, f"not valid gzip data ({exc}) in its first {raw.bytes_read} bytes") from None
            if len(out) > inflated_limit_bytes:
                raise InputFileError(path, f"{what} inflates to more than {_size_text(inflated_limit_bytes)}, the "
                                           "most this reads (docs/analysis.md, bounds)")
            if inflater.eof:
                pending, inflater, member_open = inflater.unused_data, zlib.decompressobj(31), False
            else:
                pending = inflater.unconsumed_tail
    if member_open:
        raise InputFileError(path, "truncated gzip file (the compressed stream ends early)")
    return out


def _read_or_fail(reader: io.BufferedReader, path, size_bytes: int) -> bytes:
    try:
        return reader.read1(size_bytes)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None


def decoded_text(data: bytes, path: str | os.PathLike) -> str:
    """UTF-8 text of the bytes; bytes that are not UTF-8 are an error naming where they sit."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputFileError(path, f"not UTF-8 text: byte {exc.start} (line {line}) is "
                                   f"{data[exc.start:exc.start + 1]!r}") from None


def read_input_text(path: str | os.PathLike, limit_bytes: int, what: str = "the file") -> str:
    """The whole file as UTF-8 text, at most limit_bytes."""
    return decoded_text(read_input(path, limit_bytes, what), path)


def open_input_text(path: str | os.PathLike, limit_bytes: int, what: str = "the file") -> io.TextIOWrapper:
    """A text stream (UTF-8, universal newlines off, for csv) over open_input: for tables read row by
    row. A byte that is not UTF-8 raises UnicodeDecodeError while reading: callers name the file."""
    raw = open_input(path, limit_bytes, what)
    return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", newline="")


def parsed_json(data: bytes | str, path: str | os.PathLike) -> object:
    """The JSON document; every way it can fail (bad syntax, bytes that are not UTF-8, a number of
    more than 4300 digits, nesting deeper than JSON_DEPTH_LIMIT or the parser's stack) is an
    InputFileError naming the file."""
    try:
        document = json.loads(data)
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not UTF-8 text: byte {exc.start}") from None
    except ValueError:
        raise InputFileError(path, "not valid JSON: a number with more than 4300 digits") from None
    except RecursionError:
        raise InputFileError(path, "not valid JSON: nested too deeply to read") from None
    if _nested_deeper(data, JSON_DEPTH_LIMIT):
        raise InputFileError(path, f"JSON nested more than {JSON_DEPTH_LIMIT} levels deep, the most this reads "
                                   "(docs/analysis.md, bounds)")
    return document


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")


def _nested_deeper(text: bytes | bytearray | str, limit: int) -> bool:
    """Whether valid JSON text nests lists and objects more than `limit` levels, counted on its brackets
    outside strings at C speed (about 5% of the parse; the parsed document is never walked): escaped
    backslashes and quotes dropped, every quote left opens or closes a string; strings without a bracket
    vanish as pairs of quotes; innermost bracket pairs are then removed level by level."""
    if not isinstance(text, str) and not json.detect_encoding(text).startswith("utf-8"):  # as json.loads reads it
        text = text.decode(json.detect_encoding(text))
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    skeleton = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(_AS_SQUARE, _NOT_STRUCTURE)
    skeleton = skeleton.replace(b'""', b"")
    if b'"' in skeleton:  # a string holds brackets: every other piece between quotes is outside strings
        skeleton = b"".join(skeleton.split(b'"')[0::2])
    for _ in range(limit):
        if not skeleton:
            return False
        skeleton = skeleton.replace(b"[]", b"")
    return bool(skeleton)


class JsonLineError(InputFileError):
    """A line of a JSON-lines file that is not JSON (or nests too deep): `path` is FILE:LINE."""


def read_json_lines(path: str | os.PathLike, limit_bytes: int, what: str = "the file") -> Iterator[tuple[str, object]]:
    """(FILE:LINE, value) for each non-blank line of a JSON-lines file (load/requests.jsonl), read line by
    line within limit_bytes, never whole: a line that is not JSON is a JsonLineError, bytes that are
    not UTF-8 an InputFileError naming the file."""
    with open_input_text(path, limit_bytes, what) as lines:
        try:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    where = f"{shown_path(path)}:{number}"
                    try:
                        value = parsed_json(line, where)
                    except InputFileError as exc:
                        raise JsonLineError(where, exc.problem) from None
                    yield where, value
        except UnicodeDecodeError as exc:
            raise InputFileError(path, f"not UTF-8 text ({exc.reason})") from None


def read_json(path: str | os.PathLike, limit_bytes: int, what: str = "the file") -> object:
    """A whole JSON file, bounded (open_input) and parsed (parsed_json)."""
    return parsed_json(read_input(path, limit_bytes, what), path)
