"""Steady state for SGLang: the server itself reports the whole batch running.

Why the server's count: requests in flight on the client side may still wait in a queue; /v1/loads
counts what every DP rank of every node is decoding.
"""
from __future__ import annotations

import time

from harness.load.background import BackgroundLoad
from harness.load.client import describe_loads
from harness.run_errors import RunFailed
from harness.sglang.server_actor import Deployment

POLL_S = 0.5


def wait_for_running_batch(dep: Deployment, load: BackgroundLoad, target: int, timeout_s: float, progress) -> float:
    """Until the server (/v1/loads: every DP rank, every node) reports `target` running requests; a dead
    node or failed request ends it at once."""
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        dep.check_alive()
        failure = load.first_failure()
        if failure:
            dep.check_alive()  # a dead node explains a failed request best
            raise RunFailed(f"the load failed before reaching the running batch: {failure}")
        seen = load.running_batch()
        if seen is not None:
            progress.counts(running=int(seen))
        if seen is not None and seen >= target:
            progress.note(f"server reports {seen:.0f} running requests (target {target})")
            return seen
        time.sleep(POLL_S)
    raise RunFailed(f"the server reported {seen if seen is not None else 'no'} running requests, never the target "
                    f"{target} (workload.batch_size), within {timeout_s:.0f} s (profile.timeout_s); last per rank: "
                    f"{describe_loads(load.last_loads)}; check engine.max_running_requests (divided over the DP "
                    "groups with DP attention) and the server logs in logs/")
