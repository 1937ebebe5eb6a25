"""Which live run owns a run directory: `.running` (process id and host), written when the run
starts and removed after its manifest.

Why: a run directory without a manifest is either a run in progress or one that died before writing
it (killed with SIGKILL, the machine lost). Only the owner file of a process that is still alive
says "running"; anything else is "incomplete". On another host the process cannot be checked, so
the file is taken at its word.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

OWNER_FILE = ".running"


def claim(run_dir: Path) -> None:
    (run_dir / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}) + "\n")


def release(run_dir: Path) -> None:
    try:
        (run_dir / OWNER_FILE).unlink()
    except FileNotFoundError:
        pass


def live_owner(run_dir: Path) -> str | None:
    """'pid N on HOST' when a live process owns the directory, else None."""
    from analysis.api import CONFIG_LIMIT_BYTES, read_json
    from analysis.api import AnalysisError

    try:  # bounded: a FIFO or a huge file in its place is no owner, never a hang
        owner = read_json(run_dir / OWNER_FILE, CONFIG_LIMIT_BYTES, "a .running file")
        pid, host = int(owner["pid"]), str(owner["host"])
    except (AnalysisError, ValueError, KeyError, TypeError, OverflowError):
        return None
    if not 0 < pid < 2**31:  # signal 0 to 0 or a negative id would ask about a process group
        return None
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # alive, another user's
            pass
    return f"pid {pid} on {host}"
