"""One command run on one hostile input, in a forked child with a memory and a time bound.

Why a child: a command that reads /dev/zero or inflates a gzip bomb must fail the case, not take the
test process (or the machine) with it. The child may grow at most `memory_limit_mib` beyond the address
space it had when forked (RLIMIT_AS: an allocation past it raises MemoryError, which the command would
show as a traceback) and run at most `wall_limit_s` (then it is killed and the case fails as a hang).
"""
from __future__ import annotations

import os
import resource
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

from harness.cli import main

OUTPUT_LIMIT_BYTES = 1 << 20  # what the parent reads back of each stream


@dataclass
class Outcome:
    argv: list[str]
    exit_code: int | None  # None: killed at the time bound
    out: str
    err: str
    peak_rss_mib: float
    wall_s: float

    @property
    def hung(self) -> bool:
        return self.exit_code is None

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.err

    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("moe-harness")]

    def __str__(self) -> str:
        return f"{' '.join(self.argv)} -> exit {self.exit_code} in {self.wall_s:.1f} s:\n{self.err[-2000:]}"


def _address_space_bytes() -> int:
    with open("/proc/self/statm", "rb") as fh:  # pages of the whole address space first
        return int(fh.read(256).split()[0]) * os.sysconf("SC_PAGE_SIZE")


def run_bounded(argv: list[str], memory_limit_mib: int = 1536, wall_limit_s: float = 60.0,
                cwd: str | None = None, in_child=None) -> Outcome:
    """`moe-harness ARGV` in a forked child; its exit code, its streams (the first MiB each), its peak RSS.
    `in_child`: called in the child before the command (to lower a bound the case is about)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 70
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                # the test runner's capture objects write elsewhere: the command's streams go to the files
                sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
                sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
                limit = _address_space_bytes() + memory_limit_mib * (1 << 20)
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                if cwd:
                    os.chdir(cwd)
                if in_child is not None:
                    in_child()
                code = main(argv)
                code = code if isinstance(code, int) else 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
            except BaseException:  # noqa: BLE001 - shown to the parent as what it is
                traceback.print_exc()
                code = 70
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        deadline = started + wall_limit_s
        status = usage = None
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
                status = None
                break
            time.sleep(0.02)
        wall_s = time.monotonic() - started
        streams = []
        for handle in (out, err):
            handle.seek(0)
            streams.append(handle.read(OUTPUT_LIMIT_BYTES).decode("utf-8", "replace"))
    code = None if status is None else os.waitstatus_to_exitcode(status)
    return Outcome(list(argv), code, streams[0], streams[1], usage.ru_maxrss / 1024, wall_s)
