"""Scenario sections (engine: kind sglang, cluster, profile) -> DeploymentSpec.

Takes plain mappings (a typed scenario's `model_dump()` or the raw YAML) so it does not depend on
how the schema class is built; unknown engine keys are errors naming the key.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from harness.sglang.plan import DeploymentSpec, PlanError, SpeculativeSpec

# Scenario engine keys that are not DeploymentSpec fields (used by the run, not by the plan).
RUN_ONLY_KEYS = {"kind", "start_timeout_s", "ready_timeout_s", "stop_timeout_s"}
RENAMED = {}  # scenario key -> DeploymentSpec field, when they differ


def deployment_spec(engine: Mapping[str, Any], cluster: Mapping[str, Any], where: str = "engine",
                    profile: Mapping[str, Any] | None = None,
                    workload: Mapping[str, Any] | None = None) -> DeploymentSpec:
    """The deployment of a scenario; `profile` adds profile.capture_traces, profile.expert_load and
    profile.sglang_profiler, `workload` its batch_size (the batch the profiled steps must run at)."""
    fields = {f.name for f in dataclasses.fields(DeploymentSpec)} - {"capture_traces", "expert_load", "profiler",
                                                                     "batch_size"}
    kwargs: dict[str, Any] = {}
    unknown = []
    for key, value in engine.items():
        if key in RUN_ONLY_KEYS or value is None:
            continue
        name = RENAMED.get(key, key)
        if name not in fields or name in ("nodes", "gpus_per_node"):
            unknown.append(key)
            continue
        kwargs[name] = value
    if unknown:
        raise PlanError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    if "speculative" in kwargs:
        spec = kwargs["speculative"]
        try:
            kwargs["speculative"] = SpeculativeSpec(**spec) if isinstance(spec, Mapping) else spec
        except TypeError as exc:
            raise PlanError(f"{where}.speculative: {exc}") from None
    for key in ("cuda_graph_bs", "extra_args", "passthrough_env", "launcher"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    if "env" in kwargs:
        kwargs["env"] = {str(k): str(v) for k, v in kwargs["env"].items()}
    profile = profile or {}
    batch = (workload or {}).get("batch_size")
    return DeploymentSpec(nodes=int(cluster.get("nodes", 1)), gpus_per_node=int(cluster.get("gpus_per_node", 1)),
                          batch_size=int(batch) if batch is not None else None,
                          capture_traces=bool(profile.get("capture_traces", False)),
                          expert_load=bool(profile.get("expert_load", False)),
                          profiler=str(profile.get("sglang_profiler") or "auto"),
                          profile_stage=str((profile.get("stages") or ["DECODE"])[0]), **kwargs)


def scenario_deployment(scenario) -> DeploymentSpec:
    """The deployment a typed scenario describes (engine, cluster, profile, workload): what a run plans
    and what its analysis checks the profiled batch against."""
    return deployment_spec(scenario.engine.model_dump(mode="json"), scenario.cluster.model_dump(mode="json"),
                           profile=scenario.profile.model_dump(mode="json"),
                           workload=scenario.workload.model_dump(mode="json"))
