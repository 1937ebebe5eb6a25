"""The processes of one Ray head (or node), found by the folder only they use."""
from __future__ import annotations

import os
from pathlib import Path


def pids_using(path: str) -> list[int]:
    """Processes whose command line or open files name `path` (its temp dir): Ray renames some of its
    processes (`ray::DashboardAgent`), so the command line alone misses them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if path in cmdline or any(path in os.readlink(fd) for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
