"""SGLang's router in front of a prefill/decode pair: its command, and its process on a Ray node.

Why the real router: in PD mode it is what makes a request a PD request (it picks a prefill and a
decode server, adds the prefill's bootstrap host, port and a room to the request, sends it to both
and streams the decode server's answer), so the load goes through it as a user's would.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_LAUNCHER = ("python3", "-m", "sglang_router.launch_router")
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RouterLaunch:
    """What the router's node starts (harness/node/actor.py's Launch)."""
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    secret_values: tuple[str, ...] = ()


def router_argv(launcher: list[str] | tuple[str, ...] | None, port: int, prefill_urls: list[str],
                bootstrap_port: int, decode_urls: list[str], extra_args: list[str] | tuple[str, ...] = (),
                prometheus_port: int = 29000) -> tuple[str, ...]:
    """launch_router in PD mode: every prefill server with its bootstrap port, every decode server."""
    argv = [a.replace("{python}", sys.executable).replace("{repo}", str(REPO_ROOT))
            for a in (launcher or DEFAULT_LAUNCHER)]
    argv += ["--pd-disaggregation"]
    for url in prefill_urls:
        argv += ["--prefill", url, str(bootstrap_port)]
    for url in decode_urls:
        argv += ["--decode", url]
    argv += ["--host", "0.0.0.0", "--port", str(port), "--prometheus-port", str(prometheus_port), *extra_args]
    return tuple(argv)


def router_url(node_ip: str, port: int) -> str:
    return f"http://{node_ip}:{port}"


def healthy_workers(router: str, timeout_s: float = 5.0) -> set[str]:
    """The worker URLs the router lists as healthy now (GET /workers; none while it cannot answer)."""
    from harness.http_deadline import Deadline, request

    try:
        status, body = request(router + "/workers", Deadline(timeout_s))
        workers = json.loads(body).get("workers") if status == 200 else None
    except (OSError, ValueError, AttributeError):
        return set()
    return {str(w.get("url")) for w in workers or () if isinstance(w, dict) and w.get("is_healthy")}


def start_router(launch: RouterLaunch, log_path: str, port: int, worker_urls: list[str], ready_timeout_s: float,
                 poll_s: float = 0.5):
    """The router's process under a Ray actor of its own (no GPU, wherever Ray puts it), ready once it lists
    every worker as healthy (its /health answers at once, while it registers the workers in the background:
    a request before that is refused with "No prefill workers available", seen with sglang-router 0.3.2);
    returns (actor, URL). On failure the actor is killed and a DeploymentError names the workers missing
    and carries the router's log tail."""
    import ray

    from harness.node.actor import DeploymentError, NodeActor

    actor = ray.remote(num_cpus=0)(NodeActor).remote(0)
    url = router_url(ray.get(actor.node_ip.remote(), timeout=60), port)
    deadline = time.monotonic() + ready_timeout_s
    problem, seen = None, set()
    try:
        ray.get(actor.start.remote(launch, log_path), timeout=60)
        while True:
            code = ray.get(actor.exit_code.remote(), timeout=30)
            if code is not None:
                problem = f"exited with status {code} during startup"
                break
            seen = healthy_workers(url)
            if set(worker_urls) <= seen:
                return actor, url
            if time.monotonic() > deadline:
                missing = ", ".join(u for u in worker_urls if u not in seen)
                problem = f"no healthy {missing} after {ready_timeout_s:.0f} s (engine.disaggregation.router.ready_timeout_s)"
                break
            time.sleep(poll_s)
    except (ray.exceptions.RayError, OSError) as exc:
        problem = str(exc)
    try:
        tail = ray.get(actor.log_tail.remote(), timeout=30)
    except Exception:  # noqa: BLE001 - the actor is gone; say what is known
        tail = "(no log tail: the router's actor is gone)"
    stop_router(actor)
    raise DeploymentError(f"router at {url}: {problem}\n--- log tail (router) ---\n{tail}")


def stop_router(actor, logs_to: str | Path | None = None) -> None:
    """Stop the router's process (its log copied to logs_to first where given), then its actor."""
    import ray

    from harness.node.node_files import fetch_node_file

    try:
        ray.get(actor.stop.remote(), timeout=60)
        if logs_to is not None:
            fetch_node_file(lambda offset, size: actor.read_log.remote(offset, size), Path(logs_to) / "router.log", 60)
    except Exception:  # noqa: BLE001 - a dead actor has nothing left to stop or copy
        pass
    finally:
        ray.kill(actor)
