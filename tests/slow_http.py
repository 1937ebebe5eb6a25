"""A local HTTP 'server' that accepts and then sends its answer one byte every half second, forever:
each byte comes well within any per-read timeout, so only a total deadline ends a request to it."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator


@contextlib.contextmanager
def dribbling_server() -> Iterator[str]:
    """Yields host:port; stops when the block ends."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        conn.settimeout(0.2)
        try:
            try:
                conn.recv(65536)
            except OSError:
                pass
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
                if stop.is_set():
                    break
                conn.sendall(bytes([byte]))
                time.sleep(0.5)
        except OSError:
            pass
        finally:
            conn.close()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
