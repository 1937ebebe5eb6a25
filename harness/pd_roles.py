"""A prefill/decode (PD) scenario as two ordinary SGLang scenarios, one per role.

Why: each role is an SGLang server over its own nodes, planned, checked, started, profiled and analysed
as any one-server run is (harness/engines/sglang.py); what makes it a role is its share of the nodes,
the engine keys it sets its own way, SGLang's disaggregation flags and the stage its window profiles.
Each role's scenario is written into its own folder of the run (RUN/prefill, RUN/decode), so every
command that takes a run directory reads a role as a run.
"""
from __future__ import annotations

from typing import Any

ROLES = ("prefill", "decode")
ROLE_STAGE = {"prefill": "EXTEND", "decode": "DECODE"}   # what a role's profile window holds
DECODE_PORT_OFFSET = 100  # the decode role's default ports beside the prefill role's (one host may hold both)


def disaggregation_flags(pd: dict[str, Any], role: str) -> list[str]:
    """SGLang's flags that make a server one role of the pair (server_args.py, every supported release)."""
    flags = ["--disaggregation-mode", role, "--disaggregation-transfer-backend", pd["transfer_backend"]]
    if role == "prefill":
        flags += ["--disaggregation-bootstrap-port", str(pd["bootstrap_port"])]
    if pd.get("ib_device"):
        flags += ["--disaggregation-ib-device", pd["ib_device"]]
    return flags


def role_data(scenario, role: str) -> dict[str, Any]:
    """The role's scenario as plain data: the engine's keys with the role's own over them, the role's
    nodes, its disaggregation flags after the engine's extra_args, the stage its window profiles."""
    data = scenario.model_dump(mode="json")
    engine = data["engine"]
    pd = engine.pop("disaggregation")
    own = dict(pd[role])
    nodes, extra, env = own.pop("nodes"), own.pop("extra_args"), own.pop("env")
    if role == "decode":
        for key in ("port", "dist_init_port"):
            if own.get(key) is None:
                own[key] = engine[key] + DECODE_PORT_OFFSET
    engine.update({k: v for k, v in own.items() if v is not None})
    engine["extra_args"] = [*engine["extra_args"], *extra, *disaggregation_flags(pd, role)]
    engine["env"] = {**engine["env"], **env}
    data["cluster"]["nodes"] = nodes
    data["name"] = f"{scenario.name}-{role}"
    data["description"] = f"{role} role of {scenario.name}" + (f": {scenario.description}" if scenario.description else "")
    data["profile"]["stages"] = [ROLE_STAGE[role]]
    if role == "decode" and data["profile"]["sglang_profiler"] == "auto":
        # The plain window after the pause (harness/sglang/profile.py): what ran on a real PD decode server
        # (docs/gpu-runs.md), whose first pass of each request is built from transferred KV.
        data["profile"]["sglang_profiler"] = "plain"
    if role == "prefill":
        # Prefill's window is the classic profiler's plain one; no decode graphs to capture, no decode
        # window for the expert recorder.
        data["profile"].update(capture_traces=False, expert_load=False)
    return data


def role_scenarios(scenario) -> dict:
    """{role: its scenario}, each checked as any scenario is (a ValidationError names the role's problem).
    `scenario` is a harness.scenario.Scenario, which this module does not import: the schema asks it."""
    return {role: type(scenario).model_validate(role_data(scenario, role)) for role in ROLES}


def profiled_roles(scenario) -> tuple[str, ...]:
    """The roles whose window profile.stages asks for: EXTEND the prefill role's, DECODE the decode role's."""
    return tuple(role for role in ROLES if ROLE_STAGE[role] in scenario.profile.stages)
