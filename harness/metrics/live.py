"""Live progress of a running run on an HTTP /metrics port, for Prometheus to scrape.

The driver creates one exporter per run, calls `update()` as requests finish and phases change,
and `stop()` at the end (or uses it as a context manager). It owns its own registry, so several
runs in one process never clash, and its server thread is shut down and joined on stop.
"""
from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from harness.metrics import definitions as d

STOP_TIMEOUT_S = 5.0


class LiveProgressExporter:
    def __init__(self, scenario: str, run_id: str, port: int = 0, addr: str = "127.0.0.1"):
        """port 0 picks a free port (see `.port`); addr 0.0.0.0 exposes it to a remote Prometheus."""
        self.scenario = scenario
        self.run_id = run_id
        self.registry = CollectorRegistry(auto_describe=True)
        self._completed = Counter(d.PROGRESS_REQUESTS.name.removesuffix("_total"), d.PROGRESS_REQUESTS.help,
                                  list(d.PROGRESS_REQUESTS.labels), registry=self.registry)
        self._running = Gauge(d.PROGRESS_RUNNING.name, d.PROGRESS_RUNNING.help,
                              list(d.PROGRESS_RUNNING.labels), registry=self.registry)
        self._phase = Gauge(d.PROGRESS_PHASE.name, d.PROGRESS_PHASE.help,
                            list(d.PROGRESS_PHASE.labels), registry=self.registry)
        self._updated = Gauge(d.PROGRESS_UPDATED.name, d.PROGRESS_UPDATED.help,
                              list(d.PROGRESS_UPDATED.labels), registry=self.registry)
        self._labels = (scenario, run_id)
        self._lock = threading.Lock()
        self._current_phase: str | None = None
        self._server = None
        self._thread = None
        self._requested_port = port
        self._addr = addr
        self._completed.labels(*self._labels)  # present (at 0) from the first scrape
        self._running.labels(*self._labels).set(0)
        self.set_phase("starting")

    @property
    def port(self) -> int | None:
        return self._server.server_address[1] if self._server else None

    @property
    def url(self) -> str | None:
        return f"http://{self._addr}:{self.port}/metrics" if self._server else None

    def start(self) -> "LiveProgressExporter":
        if self._server is None:
            self._server, self._thread = start_http_server(self._requested_port, addr=self._addr, registry=self.registry)
        return self

    def stop(self) -> None:
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=STOP_TIMEOUT_S)

    def __enter__(self) -> "LiveProgressExporter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def set_phase(self, phase: str) -> None:
        if phase not in d.PHASES:
            raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(d.PHASES)}")
        with self._lock:
            self._current_phase = phase
            for name in d.PHASES:
                self._phase.labels(*self._labels, name).set(1.0 if name == phase else 0.0)
            self._touch()

    def update(self, *, completed_delta: int = 0, running: int | None = None, phase: str | None = None) -> None:
        """Report progress: `completed_delta` requests finished since the last call, `running` in flight."""
        if completed_delta < 0:
            raise ValueError("completed_delta must be >= 0 (a count of newly finished requests)")
        if phase is not None:
            self.set_phase(phase)
        with self._lock:
            if completed_delta:
                self._completed.labels(*self._labels).inc(completed_delta)
            if running is not None:
                self._running.labels(*self._labels).set(running)
            self._touch()

    @property
    def phase(self) -> str | None:
        return self._current_phase

    def _touch(self) -> None:
        self._updated.labels(*self._labels).set(time.time())
