"""SGLang's router in front of a prefill/decode pair: its command, and its process on a Ray node.

Why the real router: in PD mode it is what makes a request a PD request (it picks a prefill and a
decode server, adds the prefill's bootstrap host, port and a room to the request, sends it to both
and streams the decode server's answer), so the load goes through it as a user's would.
"""
from __future__ import annotations

import sys
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


def start_router(launch: RouterLaunch, log_path: str, port: int, ready_timeout_s: float):
    """The router's process under a Ray actor of its own (no GPU, wherever Ray puts it), ready when
    /health answers 200 (it answers once its workers are registered); returns (actor, URL). On failure
    the actor is killed and a DeploymentError carries the router's log tail."""
    import ray

    from harness.node.actor import DeploymentError, NodeActor
    from harness.node.process import ServerStartError

    actor = ray.remote(num_cpus=0)(NodeActor).remote(0)
    url = router_url(ray.get(actor.node_ip.remote(), timeout=60), port)
    try:
        ray.get(actor.start.remote(launch, log_path), timeout=60)
        ray.get(actor.wait_ready.remote(url + "/health", ready_timeout_s), timeout=ready_timeout_s + 30)
    except (ray.exceptions.RayTaskError, ray.exceptions.GetTimeoutError) as exc:
        cause = exc.cause if isinstance(getattr(exc, "cause", None), ServerStartError) else exc
        try:
            tail = ray.get(actor.log_tail.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - the actor is gone; say what is known
            tail = "(no log tail: the router's actor is gone)"
        stop_router(actor)
        raise DeploymentError(f"router: {cause}\n--- log tail (router) ---\n{tail}") from None
    return actor, url


def stop_router(actor, logs_to: str | Path | None = None) -> None:
    """Stop the router's process (its log copied to logs_to first where given), then its actor."""
    import ray

    from harness.run_dir import write_atomic

    try:
        ray.get(actor.stop.remote(), timeout=60)
        if logs_to is not None:
            write_atomic(Path(logs_to) / "router.log", ray.get(actor.read_log.remote(), timeout=60))
    except Exception:  # noqa: BLE001 - a dead actor has nothing left to stop or copy
        pass
    finally:
        ray.kill(actor)
