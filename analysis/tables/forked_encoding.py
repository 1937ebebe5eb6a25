"""One rank's kernel table encoded, and its stream summary made, by a forked copy of the process
while the parent builds the other tables.

Why: with one rank the whole analysis ran on one core, and a second core (where there is one) sat
idle. Once the rank is attributed its rows are in memory; encoding them as the kernel table's row
groups (about 0.4 s of a 400 MB trace) needs nothing the D4 column, the self-checks or the step time
make, and those need nothing from it. A forked child already holds the rows (copy-on-write: nothing
is sent to it) and sends back only the encoded groups and the per-stream sums (about 1 MB), while the
parent builds the tables on the other core (docs/performance.md).

Safe by construction: the child is made only where fork is safe (POSIX, no other thread running in
this process: not inside a Ray worker or under a progress bar) and a second core is allowed; it is
reaped before the analysis returns. A child that fails, dies or says more than a table may hold
costs its time, never the table: the parent then encodes the rows itself, to the same bytes.
"""
from __future__ import annotations

import os
import pickle
import signal
import threading

from analysis.attribution.overlap import StreamSummary, stream_summary
from analysis.attribution.rows import KernelRow
from analysis.input_files import TABLE_LIMIT_BYTES
from analysis.tables.kernel_table import encode_kernel_table
from analysis.tables.parquet_writer import RowGroup


def fork_is_safe() -> bool:
    """fork() copies only the calling thread: with another thread running (Ray's, a progress bar's),
    a lock it held stays locked in the child forever."""
    return hasattr(os, "fork") and threading.active_count() == 1


def _encoded(rows: list[KernelRow]) -> tuple[list[RowGroup], list[StreamSummary]]:
    return encode_kernel_table(rows), stream_summary(rows)


class ForkedEncoding:
    """The rows' kernel table and stream summary, made in a forked child; `result()` waits for them
    (or makes them here when the child could not), `close()` reaps the child either way."""

    def __init__(self, rows: list[KernelRow]):
        self.rows = rows
        self.pid: int | None = None
        self._read_fd: int | None = None
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: encode, send, and leave without running the parent's exit handlers
            code = 1
            try:
                os.close(read_fd)
                data = pickle.dumps(_encoded(rows), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_fd, "wb") as out:
                    out.write(data)
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        self.pid, self._read_fd = pid, read_fd

    def result(self) -> tuple[list[RowGroup], list[StreamSummary]]:
        """The child's encoding, or this process's own where the child failed."""
        data = b""
        if self._read_fd is not None:
            with os.fdopen(self._read_fd, "rb") as pipe:
                self._read_fd = None
                data = pipe.read(TABLE_LIMIT_BYTES + 1)  # bounded: no table the reader would take is larger
        code = self._reap()
        if code == 0 and data and len(data) <= TABLE_LIMIT_BYTES:
            try:
                groups, streams = pickle.loads(data)
            except Exception:  # noqa: BLE001  a truncated or foreign message: encode here instead
                groups = streams = None
            if (isinstance(groups, list) and all(isinstance(g, RowGroup) for g in groups)
                    and isinstance(streams, list) and all(isinstance(s, StreamSummary) for s in streams)):
                return groups, streams
        return _encoded(self.rows)

    def _reap(self) -> int | None:
        if self.pid is None:
            return None
        _pid, status = os.waitpid(self.pid, 0)
        self.pid = None
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        """Stop and reap the child if its result was not taken (the parent failed in between)."""
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()

    def __enter__(self) -> ForkedEncoding:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
