"""The CUDA-graph capture traces each node's servers write while starting: copied into the run
directory, and whether the analysis can name replayed kernels from them.

Why both here: what the release records (versions.yaml's capture_trace: folder, file pattern, with
Python stacks or not) decides both where to look and whether the files are usable.
"""
from __future__ import annotations

from pathlib import Path

import ray

from harness.node.node_files import fetch_node_file
from harness.run_errors import RunFailed
from harness.sglang.plan import node_ranges
from harness.sglang.server_actor import Deployment


def copy_capture_traces(dep: Deployment, trace_dir: str, run_dir: Path) -> list[str]:
    """The capture traces each node's servers wrote while starting, into capture_traces/node<N>/."""
    capture = dep.plan.sglang.capture_trace
    folder = capture_folder(dep.plan, trace_dir)
    kept = []
    for rank, actor in enumerate(dep.actors):
        _, tp_ranks = node_ranges(dep.plan.spec, rank)  # this node's own files (a shared disk holds all)
        paths = sorted({p for tp in tp_ranks
                        for p in ray.get(actor.list_files.remote(folder, capture.pattern.format(tp=tp)), timeout=60)})
        if not paths:
            raise RunFailed(f"profile.capture_traces: node {rank} wrote no CUDA-graph capture trace "
                            f"({capture.pattern}) in {folder}; see logs/sglang-node{rank}.log")
        for p in paths:
            dest = run_dir / "capture_traces" / f"node{rank}" / Path(p).name
            fetch_node_file(lambda offset, size, actor=actor, p=p: actor.read_file.remote(p, offset, size), dest, 300)
            kept.append(str(dest.relative_to(run_dir)))
    return kept


def capture_folder(plan, trace_dir: str) -> str:
    """Where on each node the release writes its capture traces (versions.yaml's capture_trace.subdir)."""
    return f"{trace_dir}/{plan.sglang.capture_trace.subdir}"


def capture_use(plan, trace_dir: str) -> tuple[str | None, str]:
    """(the node-local capture folder the analysis reads, or None; why not, when None).

    Capture traces recorded without Python stacks (SGLang 0.5.17) hold no nn.Module ranges, so they
    cannot name kernels; they are still copied to the run directory, and the table says so."""
    capture = plan.sglang.capture_trace
    if not plan.spec.capture_traces:
        return None, ("profile.capture_traces is off, so the signature was not checked against the "
                      "CUDA-graph capture traces; turn it on, or run `moe-harness calibrate --truth EAGER_TRACE`")
    if not capture.with_stack:
        return None, (f"SGLang {plan.sglang.version} records its capture traces without Python stacks "
                      "(no module ranges to name kernels with): they are kept in capture_traces/ but not used; "
                      "run `moe-harness calibrate --truth EAGER_TRACE` with an eager pass recorded with stacks")
    return capture_folder(plan, trace_dir), ""
