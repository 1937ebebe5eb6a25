"""Bounded profile of every rank: POST /start_profile on node 0, wait for every rank's file on every node."""
from __future__ import annotations

import json
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Ray only where traces are collected through actors: start_profile runs without it
    from harness.sglang.server_actor import Deployment


def start_profile(url: str, output_dir: str, num_steps: int, prefix: str, activities=("CPU", "GPU"),
                  profile_by_stage: bool = True, with_stack: bool = True, record_shapes: bool = True,
                  timeout_s: float = 30.0) -> str:
    """Field names as SGLang's ProfileReqInput has them (managers/io_struct.py)."""
    body = {"output_dir": output_dir, "num_steps": num_steps, "activities": list(activities),
            "profile_by_stage": profile_by_stage, "with_stack": with_stack, "record_shapes": record_shapes,
            "profile_prefix": prefix}
    req = urllib.request.Request(url + "/start_profile", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return resp.read().decode()


def collect_traces(dep: "Deployment", trace_dir: str, prefix: str, timeout_s: float,
                   stage: str | None = None) -> dict[int, list[str]]:
    """{node_rank: trace paths on that node}; the first node missing a rank raises DeploymentError."""
    import ray
    labels = dep.plan.expected_rank_files()
    refs = {rank: dep.actors[rank].wait_for_traces.remote(trace_dir, labels[rank], prefix, timeout_s, stage)
            for rank in labels}
    return {rank: ray.get(ref, timeout=timeout_s + 30) for rank, ref in refs.items()}
