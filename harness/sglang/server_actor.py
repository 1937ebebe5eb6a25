"""Ray side of an SGLang deployment: one actor per node, placed one bundle per node.

Placement: one placement group, a bundle per node holding all its GPUs, STRICT_SPREAD, so each
actor (and the server it starts) owns one whole node. Node 0's IP becomes --dist-init-addr.
Any node that fails to start ends the deployment at once with that node's log tail.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from harness.node.actor import DeploymentError, NodeActor
from harness.node.process import ServerStartError
from harness.sglang.plan import LaunchPlan, NodeLaunch


# Threaded: exit_code / log_tail / stop must answer while wait_ready or wait_for_traces still blocks,
# or a dead peer would be noticed only when node 0's readiness wait runs out.
@ray.remote(num_cpus=0, max_concurrency=8)
class SGLangNodeActor(NodeActor):
    """NodeActor (start the server, ship files, analyse this node's ranks) with SGLang's own checks."""

    def check_args(self, launch: NodeLaunch, launcher_len: int) -> dict:
        """SGLang's own parser on this node judges the planned argv (harness/sglang/node_check.py)."""
        from harness.sglang.node_check import run_node_check
        return run_node_check(launch.argv[0], launch.server_args(launcher_len), launch.env)

    def installed_release(self, launch: NodeLaunch) -> dict:
        """The SGLang release the launcher's Python imports on this node ({sglang_version} or {error})."""
        from harness.sglang.node_check import run_node_check
        return run_node_check(launch.argv[0], [], launch.env, timeout_s=300.0, mode="version")


@dataclass
class Deployment:
    plan: LaunchPlan
    pg: object
    actors: list
    node0_ip: str
    url: str
    node_checks: dict | None = None      # {node rank: the node check's answer}
    servers_stopped: bool = field(default=False, init=False)

    def fetch_logs(self, dest_dir: str | Path) -> list[Path]:
        """Copy every node's server log into dest_dir (best effort: a dead actor's log is skipped)."""
        from harness.node.node_files import fetch_node_file
        out = []
        for rank, actor in enumerate(self.actors):
            try:
                out.append(fetch_node_file(lambda offset, size, actor=actor: actor.read_log.remote(offset, size),
                                           Path(dest_dir) / f"sglang-node{rank}.log", 60))
            except Exception:  # noqa: BLE001 - the node is gone; its tail is in the error message
                continue
        return out

    def stop_servers(self, logs_to: str | Path | None = None) -> None:
        """Stop every node's server (process groups); then, with logs_to, copy their logs, complete now.
        Once: after a run's finish stage has done it, stop() only frees the actors."""
        if self.servers_stopped:
            return
        ray.get([a.stop.remote() for a in self.actors], timeout=60)
        self.servers_stopped = True
        if logs_to is not None:
            self.fetch_logs(logs_to)

    def stop(self, logs_to: str | Path | None = None) -> None:
        """Stop the servers (and fetch their logs, see stop_servers), then free the actors and the placement group."""
        try:
            self.stop_servers(logs_to)
        finally:
            for a in self.actors:
                ray.kill(a)
            remove_placement_group(self.pg)

    def check_alive(self) -> None:
        codes = ray.get([a.exit_code.remote() for a in self.actors], timeout=30)
        for rank, code in enumerate(codes):
            if code is not None:
                tail = ray.get(self.actors[rank].log_tail.remote(), timeout=30)
                raise DeploymentError(f"node {rank}: SGLang server exited with status {code}\n"
                                      f"--- log tail (node {rank}) ---\n{tail}")


def check_nodes(dep: Deployment, timeout_s: float = 660.0) -> None:
    """Every node's SGLang parses its planned argv; any refusal ends the launch before a server starts."""
    from harness.sglang.node_check import describe

    plan = dep.plan
    refs = {node.node_rank: actor.check_args.remote(node.with_node0_ip(dep.node0_ip), plan.launcher_len)
            for node, actor in zip(plan.nodes, dep.actors)}
    dep.node_checks = {rank: ray.get(ref, timeout=timeout_s) for rank, ref in refs.items()}
    refusals = describe(dep.node_checks, plan)
    if refusals:
        raise DeploymentError("SGLang refuses the planned command; no server was started:\n  " + "\n  ".join(refusals))


def plan_for_installed_release(dep: Deployment, replan, timeout_s: float = 360.0) -> None:
    """Ask every node which SGLang it has; the deployment's plan becomes replan(that release)."""
    from harness.sglang.node_check import installed_release

    refs = {node.node_rank: actor.installed_release.remote(node)
            for node, actor in zip(dep.plan.nodes, dep.actors)}
    try:
        release = installed_release({rank: ray.get(ref, timeout=timeout_s) for rank, ref in refs.items()})
        dep.plan = replan(release)
    except ValueError as exc:  # VersionError too: a release the harness cannot plan for
        raise DeploymentError(f"{exc}; no server was started") from None


def launch(plan: LaunchPlan, log_dir: str, ready_timeout_s: float, placement_timeout_s: float = 60.0,
           connect_host: str | None = None, logs_to: str | Path | None = None, replan=None) -> Deployment:
    """Place, check every node's command with its own SGLang, start and wait for every node; on any
    failure everything started is stopped.

    log_dir is a path on each node; with logs_to (a driver path), a failed start first copies every
    node's whole log there, since the actors holding them are gone afterwards. With replan (a
    function of an SGLang release returning its plan), the plan is first made for the release the
    nodes have installed (`plan` only says how to ask them: launcher and environment).
    """
    spec = plan.spec
    bundles = [{"GPU": spec.gpus_per_node} for _ in range(spec.nodes)]
    pg = placement_group(bundles, strategy="STRICT_SPREAD")
    try:
        ray.get(pg.ready(), timeout=placement_timeout_s)
    except Exception as exc:
        remove_placement_group(pg)
        raise DeploymentError(f"cannot place {spec.nodes} node(s) x {spec.gpus_per_node} GPU(s) "
                              f"(STRICT_SPREAD) within {placement_timeout_s:.0f} s: {exc}") from None
    actors = [SGLangNodeActor.options(
        num_gpus=spec.gpus_per_node,
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
    ).remote(i) for i in range(spec.nodes)]
    node0_ip = ray.get(actors[0].node_ip.remote(), timeout=60)
    host = connect_host or (spec.host if spec.host not in ("0.0.0.0", "::") else node0_ip)
    dep = Deployment(plan, pg, actors, node0_ip, f"http://{host}:{spec.port}")
    try:
        if replan is not None:
            plan_for_installed_release(dep, replan)
            plan = dep.plan
        check_nodes(dep)
    except BaseException:
        dep.stop()
        raise
    try:
        for node, actor in zip(plan.nodes, actors):
            ray.get(actor.start.remote(node.with_node0_ip(node0_ip),
                                       str(Path(log_dir) / f"sglang-node{node.node_rank}.log")), timeout=60)
        _wait_all_ready(dep, ready_timeout_s)
    except BaseException:
        try:
            if logs_to is not None:
                dep.fetch_logs(logs_to)
        finally:
            dep.stop()
        raise
    return dep


def _wait_all_ready(dep: Deployment, timeout_s: float, poll_s: float = 0.5) -> None:
    """Node 0 answers the release's health endpoint (/health_generate); every other node must stay
    up meanwhile. First failure wins.

    Every node is polled while node 0 is still starting, so a node that dies early is named as the
    cause instead of node 0's readiness time-out that its death brings about.
    """
    health = dep.url + dep.plan.sglang.endpoints["health"]
    pending = {rank: a.wait_ready.remote(health if rank == 0 else None, timeout_s)
               for rank, a in enumerate(dep.actors)}
    ref_rank = {ref: rank for rank, ref in pending.items()}
    refs = list(pending.values())
    deadline = time.monotonic() + timeout_s + 30
    while refs:
        dep.check_alive()
        done, refs = ray.wait(refs, num_returns=1, timeout=poll_s)
        if not done:
            if time.monotonic() > deadline:
                raise DeploymentError(f"deployment not ready after {timeout_s:.0f} s")
            continue
        rank = ref_rank[done[0]]
        try:
            ray.get(done[0])
        except ray.exceptions.RayTaskError as exc:
            dep.check_alive()  # a dead node explains the failure better than a readiness time-out
            cause = exc.cause if isinstance(exc.cause, ServerStartError) else exc
            tail = ray.get(dep.actors[rank].log_tail.remote(), timeout=30)
            raise DeploymentError(f"node {rank}: {cause}\n--- log tail (node {rank}) ---\n{tail}") from None
        dep.check_alive()
