"""Start the real Debian Prometheus and Pushgateway on loopback ports for tests.

Each server gets a free port and a temporary data directory, is polled until ready (bounded),
and is terminated (then killed) at teardown by its own process id.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psutil

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# The Debian packages' commands, or binaries elsewhere (a Prometheus release tarball, say) named by
# these variables where apt cannot be used (README, "Tests").
PROMETHEUS_BIN = os.environ.get("MOE_HARNESS_PROMETHEUS_BIN", "prometheus")
PUSHGATEWAY_BIN = os.environ.get("MOE_HARNESS_PUSHGATEWAY_BIN", "prometheus-pushgateway")
PROMTOOL_BIN = os.environ.get("MOE_HARNESS_PROMTOOL_BIN", "promtool")


def missing_binaries() -> list[str]:
    return [b for b in (PROMETHEUS_BIN, PUSHGATEWAY_BIN, PROMTOOL_BIN) if shutil.which(b) is None]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get_json(url: str, timeout_s: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.load(response)


class Server:
    def __init__(self, name: str, argv: list[str], url: str, log_path: Path):
        self.name, self.url, self.log_path = name, url, log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1.0) as response:
                    if response.status == 200 and self._listens_itself():
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready; log:\n{self.log_path.read_text(errors='replace')[-2000:]}")

    def _listens_itself(self) -> bool:
        """The answer came from this process, not from another test session's server that took the
        port between free_port() and the start (seen with two suites on one machine: this Prometheus
        then read the other session's pushes of the same run id)."""
        port = urllib.parse.urlparse(self.url).port
        try:
            sockets = psutil.Process(self.process.pid).net_connections(kind="tcp")
        except psutil.Error:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in sockets)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
        self._log.close()


def _on_a_free_port(start, attempts: int = 3) -> Server:
    """start(port) on a free port, again on another where the first was taken before the server bound it."""
    for attempt in range(attempts):
        try:
            return start(free_port())
        except RuntimeError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def start_pushgateway(workdir: Path) -> Server:
    def start(port: int) -> Server:
        argv = [PUSHGATEWAY_BIN, f"--web.listen-address=127.0.0.1:{port}"]
        return Server("pushgateway", argv, f"http://127.0.0.1:{port}", workdir / "pushgateway.log")
    return _on_a_free_port(start)


def start_prometheus(workdir: Path, pushgateway_url: str, file_sd_path: Path) -> Server:
    """Scrapes the Pushgateway (honor_labels, as for batch jobs) and file-discovered live targets."""
    pushgateway_host = urllib.parse.urlparse(pushgateway_url).netloc
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "pushgateway", "honor_labels": True,
             "static_configs": [{"targets": [pushgateway_host]}]},
            {"job_name": "moe_harness_live", "file_sd_configs": [{"files": [str(file_sd_path)], "refresh_interval": "1s"}]},
        ],
    }
    config_path = workdir / "prometheus.yml"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    if not file_sd_path.exists():
        file_sd_path.write_text("[]")
    data_dir = workdir / "prometheus-data"
    data_dir.mkdir()

    def start(port: int) -> Server:
        argv = [PROMETHEUS_BIN, f"--config.file={config_path}", f"--storage.tsdb.path={data_dir}",
                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
        return Server("prometheus", argv, f"http://127.0.0.1:{port}", workdir / "prometheus.log")
    return _on_a_free_port(start)


def query(prometheus_url: str, expr: str) -> dict:
    """Prometheus /api/v1/query; returns the whole JSON answer (errors included, not raised)."""
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        return http_get_json(url)
    except urllib.error.HTTPError as exc:  # 400 carries a JSON body with errorType and error
        return json.load(exc)


def wait_for_series(prometheus_url: str, expr: str, count: int, timeout_s: float = 30.0) -> list[dict]:
    """Poll until `expr` returns at least `count` series (bounded); returns the result vector."""
    deadline = time.monotonic() + timeout_s
    result: list[dict] = []
    while time.monotonic() < deadline:
        answer = query(prometheus_url, expr)
        result = answer.get("data", {}).get("result", [])
        if len(result) >= count:
            return result
        time.sleep(0.5)
    raise AssertionError(f"{expr!r}: {len(result)} series after {timeout_s}s, expected {count}")
