"""Session fixture with a real Pushgateway + Prometheus; import it into the test module that uses it."""
from __future__ import annotations

import pytest

import prom_servers


@pytest.fixture(scope="session")
def prom_stack(tmp_path_factory):
    """A real Pushgateway and a real Prometheus scraping it, on loopback, for the whole session."""
    missing = prom_servers.missing_binaries()
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: apt-get install -y prometheus prometheus-pushgateway, or point "
                    "MOE_HARNESS_PROMETHEUS_BIN, MOE_HARNESS_PUSHGATEWAY_BIN and MOE_HARNESS_PROMTOOL_BIN at the binaries")
    workdir = tmp_path_factory.mktemp("prom")
    file_sd = workdir / "live_targets.json"
    gateway = prom_servers.start_pushgateway(workdir)
    try:
        prometheus = prom_servers.start_prometheus(workdir, gateway.url, file_sd)
    except BaseException:
        gateway.stop()
        raise
    try:
        yield {"pushgateway": gateway.url, "prometheus": prometheus.url, "file_sd": file_sd}
    finally:
        prometheus.stop()
        gateway.stop()
