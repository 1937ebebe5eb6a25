"""One server subprocess in its own process group: start, log, readiness, stop without orphans."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from pathlib import Path

from harness.http_deadline import Deadline, request
from harness.node.secrets import Secrets


# Lines that say why a server died, kept from the whole log: a crash's stack dump (C++ frames, every
# thread's Python stack) easily pushes the cause out of the last lines (a CUDA device-side assert,
# seen with SGLang 0.5.17, is 50 lines above the end).
CAUSE_LINE = re.compile(r"Traceback \(most recent call last\)|\b[A-Z]\w*(Error|Exception)\b:|Assertion .* failed|"
                        r"CUDA error|Fatal Python error|out of memory", re.IGNORECASE)
CAUSE_LINES_KEPT = 8


class ServerStartError(RuntimeError):
    """The server exited or never became ready; carries the log tail."""


class ServerProcess:
    def __init__(self, argv: list[str], env: dict[str, str], log_path: str, tail_lines: int = 60,
                 secrets: Secrets | None = None):
        self.argv, self.env, self.log_path = argv, env, Path(log_path)
        # masked by value in every log line: the plan's secrets, this process's own, and (at start) those
        # of the environment it inherits
        self.secrets = (secrets or Secrets()) | Secrets.of_launch(env, argv)
        self.proc: subprocess.Popen | None = None
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._causes: list[str] = []  # the first lines that look like a cause (CAUSE_LINE)
        self._pump: threading.Thread | None = None

    def start(self) -> int:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        # a secret-looking variable the server inherits is as secret as one passed to it (HF_TOKEN set
        # on the node, not in passthrough_env): masked in the log, and so in the run's copy and messages
        self.secrets |= Secrets.of_launch({k: v for k, v in os.environ.items() if k not in self.env})
        # start_new_session: the server and every worker it forks share one process group we can kill.
        self.proc = subprocess.Popen(self.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self._pump = threading.Thread(target=self._copy_log, daemon=True)
        self._pump.start()
        return self.proc.pid

    def _copy_log(self) -> None:
        with open(self.log_path, "a", encoding="utf-8", errors="replace") as log:
            for raw in self.proc.stdout:
                line = self.secrets.text(raw.decode("utf-8", "replace"))
                self._tail.append(line.rstrip("\n"))
                if len(self._causes) < CAUSE_LINES_KEPT and CAUSE_LINE.search(line):
                    self._causes.append(line.rstrip("\n"))
                log.write(line)
                log.flush()

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self) -> str:
        """The log's last lines, after the first lines that look like a cause when those scrolled out."""
        if self._pump is not None and self.exit_code() is not None:
            self._pump.join(timeout=2)
        causes = [c for c in self._causes if c not in self._tail]
        head = ["first lines that look like a cause:", *causes, "--- last lines ---"] if causes else []
        return "\n".join([*head, *self._tail])

    def wait_ready(self, health_url: str | None, timeout_s: float, poll_s: float = 0.2) -> None:
        """Until health_url answers 200 (node 0) or, with no URL, until the process has stayed up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.exit_code()
            if code is not None:
                raise ServerStartError(f"server exited with status {code} during startup")
            if health_url is None:
                return
            try:  # each poll answered in full within 5 s (harness/http_deadline.py), however slowly it comes
                status, _ = request(health_url, Deadline(min(5.0, max(0.5, deadline - time.monotonic()))))
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(poll_s)
        raise ServerStartError(f"server not ready after {timeout_s:.0f} s ({health_url})")

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the whole process group, SIGKILL what is left after grace_s."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # session leader: pgid == pid
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + wait_s
            while time.monotonic() < end and _group_alive(pgid):
                self.proc.poll()
                time.sleep(0.05)
            if not _group_alive(pgid):
                break
        self.proc.poll()
        if self._pump is not None:
            self._pump.join(timeout=2)
        return self.proc.returncode


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie leader still counts for killpg(0); reap it if it is ours.
    return True
