"""Opening an input file: a regular file up to a size limit, a pipe streamed up to it, nothing else.

Why: a path on the command line, in a scenario or in a run folder may name /dev/zero, a FIFO that no
program writes to, or a file of many gigabytes. Read whole, the first fills memory in seconds and the
second waits forever. Every input the tools read goes through `open_input`, which refuses folders,
devices and sockets at once, opens a FIFO without waiting for a writer (one without a writer reads as
empty), streams a pipe (`analyze <(zcat t.gz)`), and stops reading past the limit its caller names.
The limits are below, each with what it bounds (docs/analysis.md, "Bounds", lists them).
"""
from __future__ import annotations

import fcntl
import json
import io
import os
import stat

from analysis.errors import AnalysisError, shown_path

MIB = 1024 * 1024
# YAML and JSON settings: scenarios, signatures, models, hardware, rule files, output markers, expert load
CONFIG_LIMIT_BYTES = 16 * MIB
# single JSON or text documents a command reads back: analysis.json, manifest.json, an ncu export
DOCUMENT_LIMIT_BYTES = 256 * MIB
# tables read back row by row: kernels_long.csv, d4_detail.csv, steps.csv, load/requests.jsonl
TABLE_LIMIT_BYTES = 1024 * MIB


class InputFileError(AnalysisError):
    """An input that cannot be read as one: names the file and why."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = shown_path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def _size_text(limit_bytes: int) -> str:
    return f"{limit_bytes // MIB} MiB" if limit_bytes >= MIB else f"{limit_bytes} bytes"


class _Bounded(io.RawIOBase):
    """A raw reader that raises InputFileError once more than limit_bytes came through."""

    def __init__(self, fd: int, path, limit_bytes: int | None, what: str):
        self._file = io.FileIO(fd, "rb", closefd=True)
        self._path, self._limit, self._what = path, limit_bytes, what
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        got = self._file.readinto(buffer)
        if got:
            self.bytes_read += got
            if self._limit is not None and self.bytes_read > self._limit:
                raise InputFileError(self._path, f"{self._what} larger than {_size_text(self._limit)}, the most "
                                                 "this reads (docs/analysis.md, bounds)")
        return got or 0

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
        # opened without waiting for a FIFO's writer; reads block again from here (no writer: end of file)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return _Bounded(fd, path, limit_bytes, what)


def read_input(path: str | os.PathLike, limit_bytes: int, what: str = "the file") -> bytes:
    """The whole file, at most limit_bytes (InputFileError past it)."""
    with open_input(path, limit_bytes, what) as raw:
        try:
            return io.BufferedReader(raw).read()
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
    more than 4300 digits, nesting deeper than the parser's stack) is an InputFileError naming the file."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not UTF-8 text: byte {exc.start}") from None
    except ValueError:
        raise InputFileError(path, "not valid JSON: a number with more than 4300 digits") from None
    except RecursionError:
        raise InputFileError(path, "not valid JSON: nested too deeply to read") from None


def read_json(path: str | os.PathLike, limit_bytes: int, what: str = "the file") -> object:
    """A whole JSON file, bounded (open_input) and parsed (parsed_json)."""
    return parsed_json(read_input(path, limit_bytes, what), path)
