"""Network calls end at a total deadline, however slowly the other side answers (tests/slow_http.py
sends a byte every half second: within any per-read timeout)."""
from __future__ import annotations

import sys

import pytest

import slow_http
from harness.node.process import ServerProcess, ServerStartError
from harness.sglang.http_post import post_json


@pytest.mark.timeout(60)
def test_a_health_check_that_dribbles_ends_at_the_ready_timeout(tmp_path):
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], {}, str(tmp_path / "log"))
    server.start()
    try:
        with slow_http.dribbling_server() as address:
            with pytest.raises(ServerStartError, match="not ready after 2 s"):
                server.wait_ready(f"http://{address}/health_generate", timeout_s=2.0)
    finally:
        server.stop(grace_s=1.0)


@pytest.mark.timeout(60)
def test_a_post_to_sglang_that_dribbles_ends_at_its_deadline():
    with slow_http.dribbling_server() as address:
        with pytest.raises(OSError, match="no complete answer within 2 s"):
            post_json(f"http://{address}/start_profile", {"num_steps": 3}, timeout_s=2.0)
