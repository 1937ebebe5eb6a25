"""Engine log lines kept in memory until the driver drains them into the run directory.

Why not only a file: the engine may run on another node; the driver collects the lines through
each call's result, so the run directory holds the log even when the engine process dies later.
"""
from __future__ import annotations

import sys
import time


class LogBuffer:
    def __init__(self, source: str):
        self.source = source
        self._pending: list[str] = []

    def _add(self, level: str, fmt: str, *args: object) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        line = f"{stamp} {level:<5} {self.source}: {fmt % args if args else fmt}"
        self._pending.append(line)
        print(line, file=sys.stderr, flush=True)

    def info(self, fmt: str, *args: object) -> None:
        self._add("INFO", fmt, *args)

    def error(self, fmt: str, *args: object) -> None:
        self._add("ERROR", fmt, *args)

    def drain(self) -> list[str]:
        """Lines logged since the last drain."""
        lines, self._pending = self._pending, []
        return lines

    def flush_to_stderr(self) -> None:
        sys.stderr.flush()
