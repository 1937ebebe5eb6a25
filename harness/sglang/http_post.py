"""One POST to an SGLang server's HTTP API, JSON in, (status, text) out.

Why its own module: profile.py calls the server around its window and expert_load.py starts and
stops the expert record from inside that window; both POST through this, so neither imports the other.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request


def post_json(url: str, body: dict | None, timeout_s: float) -> tuple[int, str]:
    """(HTTP status, text) of one POST with a JSON body (none when body is None); HTTP errors are answers too."""
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
