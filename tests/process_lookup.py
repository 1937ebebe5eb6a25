"""The processes of one Ray head (or node), found by the folder only they use, and how to stop them."""
from __future__ import annotations

import os
import signal
import subprocess
import time
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


def stop_ray_head(proc: subprocess.Popen, temp_dir: str, wait_s: float = 30.0, leftovers_s: float = 20.0) -> None:
    """Stop a `ray start --head --block` process (started in a session of its own) and every process
    of its head: `ray start` is sent SIGTERM alone and stops the head's processes itself (about 2 s
    here); sent to the whole process group it took 33 s to exit, its processes dying under it (each
    Ray head of the suite cost half a minute at its teardown). SIGKILL to the group after `wait_s`;
    then any process still using `temp_dir` (one that left the group) is sent SIGTERM, SIGKILL in the
    last 10 s of `leftovers_s`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    deadline = time.monotonic() + leftovers_s
    while (left := pids_using(temp_dir)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGTERM if time.monotonic() < deadline - 10 else signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(1)
