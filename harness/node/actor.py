"""The engine-agnostic part of the Ray actor each node of a deployment runs: start a process, tell
where it landed, ship files back, wait for the ranks' traces, analyse this node's own ranks.

Why on the node: nodes share no file system, so a node's files come back through its actor, and its
ranks are analysed where their traces are (only the row tables travel; harness/node/node_analysis.py
combines them). An engine's actor subclasses NodeActor under ray.remote and adds its own calls
(SGLang's: harness/sglang/server_actor.py).
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Protocol

import ray

from analysis.api import read_input_range
from harness.node.node_files import NODE_FILE_PIECE_BYTES
from harness.node.process import ServerProcess
from harness.node.secrets import Secrets
from harness.node.trace_files import TraceWaitError, wait_for_traces


class DeploymentError(RuntimeError):
    """A node failed: the message names the node and ends with its log tail."""


class Launch(Protocol):
    """What a node starts: an engine's launch plan for the node (SGLang's NodeLaunch)."""

    argv: tuple[str, ...]
    env: dict[str, str]
    secret_values: tuple[str, ...]  # masked by value in the server's log


class NodeActor:
    """One node's process and files; an engine's actor class is `ray.remote(...)` over a subclass."""

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

    def start(self, launch: Launch, log_path: str) -> int:
        self.server = ServerProcess(list(launch.argv), launch.env, log_path,
                                    secrets=Secrets(getattr(launch, "secret_values", ())))
        return self.server.start()

    def read_log(self, offset: int = 0, size_bytes: int = NODE_FILE_PIECE_BYTES) -> bytes:
        """A piece of the server log (already masked), so the driver can keep it in the run directory."""
        if self.server is None or not self.server.log_path.exists():
            return b""
        return read_input_range(self.server.log_path, offset, min(size_bytes, NODE_FILE_PIECE_BYTES), "the server log")

    def read_file(self, path: str, offset: int = 0, size_bytes: int = NODE_FILE_PIECE_BYTES) -> bytes:
        """A piece of one file of this node (a rank's trace), shipped through Ray: nodes share no file
        system; harness/node/node_files.py asks for the pieces and writes them."""
        return read_input_range(path, offset, min(size_bytes, NODE_FILE_PIECE_BYTES))

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
        """Analyse this node's ranks where the traces are; only the row tables travel back
        (harness/node/node_analysis.py: analyze_node, then combine on the driver)."""
        from analysis.api import AnalysisError
        from harness.node.node_analysis import analyze_node

        try:
            return analyze_node(paths, options)
        except AnalysisError as exc:
            raise DeploymentError(f"node {self.node_rank}: analysis of {len(paths)} trace(s) failed: {exc}") from None

    def calibrate_signature(self, paths: list[str], options: dict) -> dict:
        """The run's signature checked against this node's captures (node_analysis.calibrate_node)."""
        from harness.node.node_analysis import calibrate_node

        return calibrate_node(self.node_rank, paths, options)

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

