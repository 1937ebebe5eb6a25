"""Whether a Ray cluster will take this client, checked before ray.init: one line naming the fix if not.

Why: a head with Ray's token authentication (RAY_AUTH_MODE=token on the head; KubeRay's
authOptions.mode: token) refuses a client that sends no token. Ray sends one only where the client
itself has RAY_AUTH_MODE=token: Ray 2.60 turns it on by itself only for a local cluster found
automatically, never for an explicit address such as RAY_ADDRESS. ray.init then retries for about 20 s and ends with
`ConnectionError: Failed to connect to Ray cluster`, naming no cause (with a wrong token it had not
returned after 3 minutes). This check asks the cluster's GCS once (Ray's own client, the call ray.init
makes first) and turns a refusal into RayTokenAuthError. It looks for a token before asking: with
RAY_AUTH_MODE=token and no token anywhere, Ray's GCS client aborts the whole process.
The token is read as Ray reads it: RAY_AUTH_TOKEN, else the file named by RAY_AUTH_TOKEN_PATH, else
~/.ray/auth_token (docs/kuberay.md#token-authentication).
"""
from __future__ import annotations

import socket

from harness.run_errors import RunFailed

AUTH_MODE_ENV = "RAY_AUTH_MODE"
REACHABLE_WITHIN_S = 5.0  # a GCS that does not accept a TCP connection in this time is ray.init's to report
GUIDE = "docs/kuberay.md#token-authentication"


class RayTokenAuthError(RunFailed):
    """The cluster uses token authentication and this client cannot authenticate."""


def check_cluster_takes_client(address: str | None) -> None:
    """Raise RayTokenAuthError when the Ray cluster at `address` (host:port of its GCS) would refuse
    this client for want of the right token. Other addresses (None, auto, local, ray://) and
    unreachable clusters are left to ray.init, which reports them itself."""
    host_port = _gcs_host_port(address)
    if host_port is None or not _accepts_tcp(*host_port):
        return
    from ray._private.authentication.authentication_utils import is_token_auth_enabled
    from ray._raylet import AuthenticationTokenLoader, GcsClient
    from ray.exceptions import AuthenticationError

    client_sends_token = is_token_auth_enabled()
    if client_sends_token and not AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True):
        raise RayTokenAuthError(
            f"{AUTH_MODE_ENV}=token is set but no Ray token was found: put the cluster's token in "
            "RAY_AUTH_TOKEN, or in a file named by RAY_AUTH_TOKEN_PATH, or in ~/.ray/auth_token (" + GUIDE + ")")
    try:
        GcsClient(address=address.strip())
    except AuthenticationError:
        if client_sends_token:
            raise RayTokenAuthError(
                f"the Ray cluster at {address} refused this client's token: use the token the cluster was "
                "started with (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token; " + GUIDE + ")") from None
        raise RayTokenAuthError(
            f"the Ray cluster at {address} uses token authentication and this client sends no token: set "
            f"{AUTH_MODE_ENV}=token and the cluster's token in RAY_AUTH_TOKEN (or a file named by "
            "RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token) (" + GUIDE + ")") from None
    except Exception:  # noqa: BLE001 - anything but a refusal is ray.init's to report, in its words
        return


def _gcs_host_port(address: str | None) -> tuple[str, int] | None:
    """(host, port) of a plain GCS address such as 10.0.0.1:6379; None for what is not one."""
    text = (address or "").strip()
    if not text or "://" in text or text in ("auto", "local"):
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _accepts_tcp(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=REACHABLE_WITHIN_S):
            return True
    except OSError:
        return False
