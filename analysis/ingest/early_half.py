"""A one-rank trace's second-half reader started before the pipeline is imported, for the load to take over.

Why: `analyze` imported the pipeline (the attribution, the tables, the checks: about 0.07 s) before
the load began, on one core while the other waited; the child that reads the file's second half
(second_half.py) needs only the loader. analysis/early_read.py starts it first, so it reads while the
pipeline is imported. The load takes it over when it opens the same file: the same device, inode,
size and modification time (`take`); one the load does not take is closed by the caller
(`close_all`), so none outlives the analysis. A file changed in between is read by the load's own child.
"""
from __future__ import annotations

import os

from analysis.ingest.second_half import GzipSecondHalf, SecondHalf

Identity = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns
_waiting: list[tuple[Identity, SecondHalf | GzipSecondHalf]] = []


def identity(info: os.stat_result) -> Identity:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def keep(info: os.stat_result, half: SecondHalf | GzipSecondHalf) -> None:
    """A started reader of the file `info` describes, for the load to take."""
    _waiting.append((identity(info), half))


def take(fd: int, kind: type[SecondHalf] | type[GzipSecondHalf]) -> SecondHalf | GzipSecondHalf | None:
    """The waiting reader of the file open as `fd`, no longer waiting; None where there is none, or
    where it reads the file as another kind than the load does (it is stopped: never seen, as one
    magic decides both)."""
    if not _waiting:
        return None
    try:
        mine = identity(os.fstat(fd))
    except OSError:
        return None
    for i, (ident, half) in enumerate(_waiting):
        if ident == mine:
            del _waiting[i]
            if isinstance(half, kind):
                return half
            half.close()
            return None
    return None


def close_all() -> None:
    """Stop and reap every reader the load did not take."""
    while _waiting:
        _waiting.pop()[1].close()
