"""Files written aside and moved in: a reader never sees half a file, a failure leaves none.

Why one helper: the analysis's tables, the kernel report, the exports and the run directory's files
were each written by a helper of their own (four in all), which differed where it matters: one left
its temporary file behind on failure, one kept mkstemp's owner-only mode on the files a run hands to
others. Every file the project writes goes through this one: a temporary file in the target's folder
(so the move is a rename on one file system), the mode the umask gives a new file, the move over the
target only once every byte is written (and, `durable`, on disk), the temporary removed otherwise.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

_UMASK = os.umask(0o022)
os.umask(_UMASK)


@contextlib.contextmanager
def written_aside(path: str | Path, durable: bool = False) -> Iterator[Path]:
    """A temporary path beside `path` to write (by any writer that takes a path); moved over `path`
    when the block ends without an error, removed when it raises. `durable`: flushed to disk first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    temp = Path(tmp)
    try:
        os.chmod(temp, 0o666 & ~_UMASK)  # mkstemp makes it owner-only; a written file follows the umask
        yield temp
        if durable:
            with open(temp, "rb+") as handle:
                os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_atomically(path: str | Path, data: bytes | str | Callable[[IO], None], binary: bool = True,
                     durable: bool = False) -> Path:
    """Write `data` (bytes, text, or a function that writes into the open file: binary, or text with
    newline="" when `binary` is False) to `path` through written_aside; the path written."""
    with written_aside(path, durable) as temp:
        if callable(data):
            with open(temp, "wb") if binary else open(temp, "w", newline="", encoding="utf-8") as handle:
                data(handle)
        else:
            temp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)
