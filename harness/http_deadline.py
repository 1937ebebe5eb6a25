"""One HTTP request with a total deadline and a bounded answer, credentials taken out of the URL.

Why: urllib's timeout bounds each socket operation, not the request: a server that answers a byte at
a time held `moe-harness metrics` for minutes before it said "pushed". Here a timer shuts the
connection when the deadline passes, whatever the server does; the answer is read up to a limit; and
`http://user:password@host` becomes a Basic authorization header (urllib took the credentials for
part of the host name), so the credentials never travel in, or are printed with, the URL.
"""
from __future__ import annotations

import base64
import http.client
import socket
import threading
import time
import urllib.parse

ANSWER_LIMIT_BYTES = 16 * 1024 * 1024  # the most of one answer that is read


class DeadlineExceeded(OSError):
    """No complete answer within the deadline."""


class Deadline:
    """A total time budget shared by several requests (a push, then the old groups' deletion)."""

    def __init__(self, total_s: float):
        self.total_s = total_s
        self._ends = time.monotonic() + total_s

    def remaining_s(self) -> float:
        left = self._ends - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"no answer within {self.total_s:g} s in all")
        return left


def split_credentials(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without user:password@, the Authorization header those credentials make, or {})."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, {}
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = host + (f":{parts.port}" if parts.port else "")
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), {"Authorization": f"Basic {token}"}


def request(url: str, deadline: Deadline, method: str = "GET", body: bytes | None = None,
            headers: dict[str, str] | None = None, limit_bytes: int = ANSWER_LIMIT_BYTES) -> tuple[int, bytes]:
    """(status, answer) of one request; an HTTP error status is an answer too. Anything else is an
    OSError (DeadlineExceeded past the deadline; a malformed answer too)."""
    url, auth = split_credentials(url)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OSError(f"not an http(s) URL: {url}")
    left_s = deadline.remaining_s()
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=left_s)
    fired = threading.Event()

    def shut() -> None:
        fired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(left_s, shut)
    timer.daemon = True
    timer.start()
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    try:
        conn.request(method, path, body=body, headers={**(headers or {}), **auth})
        response = conn.getresponse()
        answer = response.read(limit_bytes + 1)
        if len(answer) > limit_bytes:
            raise OSError(f"answer larger than {limit_bytes} bytes from {url}")
        if fired.is_set():
            raise DeadlineExceeded(f"no complete answer within {deadline.total_s:g} s")
        return response.status, answer
    except (OSError, http.client.HTTPException) as exc:
        if fired.is_set():
            raise DeadlineExceeded(f"no complete answer within {deadline.total_s:g} s") from None
        if isinstance(exc, OSError):
            raise
        raise OSError(f"malformed HTTP answer from {url}: {exc!r}") from None
    finally:
        timer.cancel()
        conn.close()
