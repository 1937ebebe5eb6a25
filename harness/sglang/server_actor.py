"""Ray side of an SGLang deployment: one actor per node, placed one bundle per node.

Placement: one placement group, a bundle per node holding all its GPUs, STRICT_SPREAD, so each
actor (and the server it starts) owns one whole node. Node 0's IP becomes --dist-init-addr.
Any node that fails to start ends the deployment at once with that node's log tail.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from harness.sglang.plan import LaunchPlan, NodeLaunch
from harness.sglang.process import ServerProcess, ServerStartError
from harness.sglang.trace_files import TraceWaitError, wait_for_traces


class DeploymentError(RuntimeError):
    """A node failed: the message names the node and ends with its log tail."""


# Threaded: exit_code / log_tail / stop must answer while wait_ready or wait_for_traces still blocks,
# or a dead peer would be noticed only when node 0's readiness wait runs out.
@ray.remote(num_cpus=0, max_concurrency=8)
class SGLangNodeActor:
    def __init__(self, node_rank: int):
        self.node_rank = node_rank
        self.server: ServerProcess | None = None

    def node_ip(self) -> str:
        return ray.util.get_node_ip_address()

    def where(self) -> dict:
        """Which Ray node and host this actor (and so its server) landed on, for the manifest."""
        import socket
        return {"node_rank": self.node_rank, "ip": ray.util.get_node_ip_address(),
                "ray_node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname()}

    def check_args(self, launch: NodeLaunch, launcher_len: int) -> dict:
        """SGLang's own parser on this node judges the planned argv (harness/sglang/node_check.py)."""
        from harness.sglang.node_check import run_node_check
        return run_node_check(launch.argv[0], launch.server_args(launcher_len), launch.env)

    def installed_release(self, launch: NodeLaunch) -> dict:
        """The SGLang release the launcher's Python imports on this node ({sglang_version} or {error})."""
        from harness.sglang.node_check import run_node_check
        return run_node_check(launch.argv[0], [], launch.env, timeout_s=300.0, mode="version")

    def start(self, launch: NodeLaunch, log_path: str) -> int:
        self.server = ServerProcess(list(launch.argv), launch.env, log_path)
        return self.server.start()

    def read_log(self) -> bytes:
        """The whole server log (already masked), so the driver can keep it in the run directory."""
        if self.server is None or not self.server.log_path.exists():
            return b""
        return self.server.log_path.read_bytes()

    def read_file(self, path: str) -> bytes:
        """One file of this node (a rank's trace), shipped through Ray: nodes share no file system."""
        return Path(path).read_bytes()

    def remove_files(self, paths: list[str]) -> None:
        for p in paths:
            Path(p).unlink(missing_ok=True)

    def wait_ready(self, health_url: str | None, timeout_s: float) -> None:
        self.server.wait_ready(health_url, timeout_s)

    def exit_code(self) -> int | None:
        return self.server.exit_code() if self.server else None

    def log_tail(self) -> str:
        return self.server.log_tail() if self.server else ""

    def pid(self) -> int | None:
        return self.server.proc.pid if self.server and self.server.proc else None

    def wait_for_traces(self, trace_dir: str, rank_labels: list[str], prefix: str, timeout_s: float,
                        stage: str | None = None, rename_to: str | None = None) -> list[str]:
        """Paths of this node's trace files, one per expected rank label; raises when some never appear.

        With `stage` (DECODE, or decode from profile V2), only that stage's files count: a capture of
        another stage (EXTEND) is never taken for decode steps. A file counts once its size is non-zero
        and unchanged over one poll: the profiler writes the final name progressively. `rename_to`
        renames the stage suffix (V2's -decode to -DECODE, the suffix the analysis reads).
        """
        try:
            found = wait_for_traces(trace_dir, rank_labels, prefix, timeout_s, stage,
                                    alive=lambda: self.exit_code() is None)
        except TraceWaitError as exc:
            what = f" ({stage} stage)" if stage else ""
            raise DeploymentError(f"node {self.node_rank}: {str(exc).replace('no trace for', f'no trace{what} for')}") from None
        return [str(self._renamed(Path(p), stage, rename_to)) for p in found]

    @staticmethod
    def _renamed(path: Path, stage: str | None, rename_to: str | None) -> Path:
        if not stage or not rename_to or stage == rename_to:
            return path
        target = path.with_name(path.name[: -len(f"-{stage}.trace.json.gz")] + f"-{rename_to}.trace.json.gz")
        path.rename(target)
        return target

    def list_files(self, folder: str, pattern: str) -> list[str]:
        """Files of this node matching a glob pattern in folder (e.g. CUDA-graph capture traces)."""
        return sorted(str(p) for p in Path(folder).glob(pattern) if p.is_file())

    def analyze_traces(self, paths: list[str], options: dict) -> dict:
        """Analyse this node's ranks where the traces are; only the row tables travel back.

        Each rank is attributed on its own (analysis.api), so the driver combining every node's rows
        into one D4 column gets what analysing all files in one place would give. With
        options["capture_traces"] (this node's CUDA-graph capture folder), replayed kernels are named
        from the captures.
        """
        from analysis.api import AnalysisError, AnalysisOptions, analyze
        captures = _capture_folders_with_files(options.get("capture_traces") or [])
        signature = options.get("signature", "generic")
        try:
            result = analyze(paths, signature=signature, model=options.get("model"),
                             options=AnalysisOptions(run=options.get("run", "run"),
                                                     rank_policy=options.get("rank_policy", "mean"),
                                                     tbo=bool(options.get("tbo", False)),
                                                     jobs=options.get("jobs"), capture_traces=captures))
        except AnalysisError as exc:
            raise DeploymentError(f"node {self.node_rank}: analysis of {len(paths)} trace(s) failed: {exc}") from None
        return {"kernel_rows": result.kernel_rows, "step_rows": result.step_rows, "problems": result.problems}

    def calibrate_signature(self, paths: list[str], options: dict) -> dict:
        """The run's signature checked against this node's first decode trace named by its captures
        (analysis.attribution.calibration), or why it could not be; the driver picks the signature from these."""
        from analysis.api import AnalysisError, calibrate, render_calibration_markdown as render_markdown
        signature = options.get("signature", "generic")
        asked = options.get("capture_traces") or []
        captures = _capture_folders_with_files(asked)
        decode_path = sorted(paths)[0]
        where = {"node": self.node_rank, "decode_trace": Path(decode_path).name}
        if not captures:
            return {**where, "error": f"no capture trace in {', '.join(asked)}"}
        try:
            cal = calibrate(signature, decode_trace=decode_path, capture_refs=captures)
        except AnalysisError as exc:
            return {**where, "error": str(exc)}
        return {**where, "result": cal.to_dict(), "markdown": render_markdown(cal)}

    def copy_traces(self, paths: list[str], dest_dir: str) -> list[str]:
        Path(dest_dir).mkdir(parents=True, exist_ok=True)
        out = []
        for p in paths:
            target = Path(dest_dir) / Path(p).name
            tmp = target.with_suffix(target.suffix + ".tmp")
            shutil.copyfile(p, tmp)
            tmp.rename(target)
            out.append(str(target))
        return out

    def stop(self) -> int | None:
        return self.server.stop() if self.server else None


def _capture_folders_with_files(folders: list[str]) -> list[str]:
    """The node's capture folders that exist and hold files (a release that wrote none leaves it empty)."""
    return [d for d in folders if Path(d).is_dir() and any(Path(d).iterdir())]


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
        from harness.run_dir import write_atomic
        refs = [a.read_log.remote() for a in self.actors]
        out = []
        for rank, ref in enumerate(refs):
            try:
                data = ray.get(ref, timeout=60)
            except Exception:  # noqa: BLE001 - the node is gone; its tail is in the error message
                continue
            out.append(write_atomic(Path(dest_dir) / f"sglang-node{rank}.log", data))
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
