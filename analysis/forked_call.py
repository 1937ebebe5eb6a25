"""A function of data this process already holds, run by a forked copy of the process beside it.

Why: a one-rank analysis ran on one core while a second (where there is one) sat idle, and the work
that would use it reads objects already in memory (the steps' kernels, the rows). A forked child
holds them too (copy-on-write: nothing is sent to it) and sends back only its result, pickled. Used
for the steps' names (analysis/attribution/rank/forked_naming.py) and the kernel table's encoding
(analysis/pipeline/forked_encoding.py); the load's second half (analysis/ingest/second_half.py) is read
by a child forked before anything is read, which sends back what it read.

Safe by construction: a child is made only where fork is safe (POSIX, no other thread running in this
process: not inside a Ray worker or under a progress bar) and the machine has room for the pages the
child copies (fork_allowed), and it is always reaped by `close()` (the callers' `finally`). A child that cannot be made (fork or pipe refused), fails, dies, or sends more than
`limit_bytes` or something `valid` refuses costs its time, never the result: `result()` then calls
the function here.
"""
from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable
from typing import Any


_PROC_READ_BYTES = 1 << 16  # /proc/meminfo and /proc/self/status are a few KiB


def fork_is_safe() -> bool:
    """fork() copies only the calling thread: with another thread running (Ray's C++ threads, a
    progress bar's), a lock it held stays locked in the child forever. Every thread of the process
    counts (/proc/self/task), not only those Python's threading module started; where there is no
    /proc to ask (not Linux: macOS's system libraries are not fork-safe either), no fork."""
    if not hasattr(os, "fork"):
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1 and threading.active_count() == 1
    except OSError:
        return False


def _proc_kib(path: str, key: str) -> int | None:
    """A `key:  N kB` line of a /proc file, in KiB; None where there is none."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(_PROC_READ_BYTES).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            parts = line.split()
            return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    return None


def room_for_a_copy() -> bool:
    """A child comes to copy most of what it reads of this process (reference counts are written, so
    copy-on-write pages are copied): fork only where the machine has at least twice this process's
    resident memory available (Linux: /proc; elsewhere nothing says otherwise)."""
    available, resident = _proc_kib("/proc/meminfo", "MemAvailable"), _proc_kib("/proc/self/status", "VmRSS")
    return available is None or resident is None or available >= 2 * resident


def cores_for(jobs: int | None) -> int:
    """Processes an analysis may use: `jobs` (--jobs) where given, else the cores this process may run on."""
    if jobs:
        return jobs
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def fork_allowed() -> bool:
    """Where a helper may be forked: safe (fork_is_safe) and with room for its copy (room_for_a_copy)."""
    return fork_is_safe() and room_for_a_copy()


class ForkedCall:
    """`fn(*args)` in a forked child; `result()` waits for it (or calls it here when the child could
    not deliver), `close()` stops and reaps the child either way."""

    def __init__(self, fn: Callable[..., Any], args: tuple, valid: Callable[[Any], bool], limit_bytes: int):
        self.fn, self.args, self.valid, self.limit_bytes = fn, args, valid, limit_bytes
        self.pid: int | None = None
        self._read_fd: int | None = None
        try:
            read_fd, write_fd = os.pipe()
        except OSError:  # out of file descriptors: no child, result() calls it here
            return
        try:
            pid = os.fork()
        except OSError:  # no memory or process left for a child: result() calls it here
            os.close(read_fd)
            os.close(write_fd)
            return
        if pid == 0:  # the child: compute, send, and leave without running the parent's exit handlers
            code = 1
            try:
                os.close(read_fd)
                data = pickle.dumps(fn(*args), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_fd, "wb") as out:
                    out.write(data)
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        self.pid, self._read_fd = pid, read_fd

    def result(self, here: bool = True) -> Any:
        """The child's result, or this process's own where the child could not deliver one (None
        instead with `here` False: the caller has its own way on)."""
        data = b""
        if self._read_fd is not None:
            with os.fdopen(self._read_fd, "rb") as pipe:
                self._read_fd = None
                data = pipe.read(self.limit_bytes + 1)  # bounded: more than the caller allows is refused
        code = self._reap()
        if code in (0, None) and data and len(data) <= self.limit_bytes:  # None: SIGCHLD ignored, no status
            try:
                value = pickle.loads(data)
            except Exception:  # noqa: BLE001  a truncated or foreign message: computed here instead
                value = None
            else:
                if self.valid(value):
                    return value
        return self.fn(*self.args) if here else None

    def _reap(self) -> int | None:
        """The child's exit code once it is gone; None where there is no child, or no status to read (a
        process that ignores SIGCHLD has its children reaped by the system)."""
        if self.pid is None:
            return None
        pid, self.pid = self.pid, None
        try:
            _pid, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return None
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        """Stop and reap the child if its result was not taken (the caller failed in between)."""
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()

    def __enter__(self) -> ForkedCall:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
