"""One POST to an SGLang server's HTTP API, JSON in, (status, text) out.

Why its own module: profile.py calls the server around its window and expert_load.py starts and
stops the expert record from inside that window; both POST through this, so neither imports the other.
"""
from __future__ import annotations

import json

from harness.http_deadline import Deadline, request


def post_json(url: str, body: dict | None, timeout_s: float) -> tuple[int, str]:
    """(HTTP status, text) of one POST with a JSON body (none when body is None), answered within
    timeout_s in all (harness/http_deadline.py); HTTP errors are answers too."""
    data = json.dumps(body).encode() if body is not None else b""
    status, answer = request(url, Deadline(timeout_s), method="POST", body=data,
                             headers={"Content-Type": "application/json"})
    return status, answer.decode(errors="replace")
