"""A deployment's launch_server arguments, spelled for one SGLang release (versions.yaml `flags`).

Each flag keeps the scenario key it came from, so a flag that SGLang rejects is reported with the
key to change (engine.cuda_graph_max_bs), not only with its spelling.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from harness.sglang.version import SGLangVersion

NODE0_PLACEHOLDER = "{node0_ip}"
ALWAYS = ("model_path", "host", "port", "tp")      # rendered even at their defaults
ABOVE_ONE = ("pp", "dp", "ep", "nodes")            # rendered only when larger than 1
# Rendering order: the plan reads top to bottom like a hand-written command.
ORDER = ("model_path", "host", "port", "tp", "pp", "dp", "dp_attention", "ep", "moe_a2a_backend", "deepep_mode",
         "moe_runner_backend", "two_batch_overlap", "attention_backend", "cuda_graph_bs", "cuda_graph_max_bs",
         "load_format", "speculative", "max_running_requests", "chunked_prefill_size", "context_length", "mem_fraction_static",
         "trust_remote_code", "enable_metrics", "capture_traces", "expert_load", "nodes")
SCENARIO_SECTION = {"nodes": "cluster", "gpus_per_node": "cluster", "capture_traces": "profile", "expert_load": "profile"}


def scenario_key(field: str) -> str:
    """Where a deployment field comes from in a scenario file: engine.tp, cluster.nodes, ..."""
    return f"{SCENARIO_SECTION.get(field, 'engine')}.{field}"


def node_port(port: int, node_rank: int) -> int:
    """The HTTP port of one node: node 0 serves the API on `port`; every other node's SGLang binds a
    stand-by health server on its own --port (engine.py, node_rank >= 1), so node r takes port + r and
    two nodes sharing a host (two Ray nodes on one machine) do not fight over one port. Nodes >= 1
    derive their inter-node ports from --dist-init-addr, never from --port."""
    return port + node_rank


def _wanted(field: str, value: Any, spec) -> bool:
    if field in ALWAYS:
        return True
    if field == "dp":
        return value > 1 and not spec.dp_attention
    if field in ABOVE_ONE:
        return value > 1
    return value not in (None, False, (), [], "")


def _expand(template: tuple[str, ...], value: Any, context: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for token in template:
        if token == "{value...}":
            out += [str(v) for v in value]
        else:
            out.append(token.format_map({**context, "value": value}))
    return out


def render_server_args(spec, node_rank: int, row: SGLangVersion) -> tuple[list[str], dict[str, str]]:
    """(argv after the launcher, {flag: scenario key}) for one node of the deployment."""
    context: dict[str, Any] = {f: getattr(spec, f) for f in spec.__dataclass_fields__}
    context.update(tp=spec.tp_size, node_rank=node_rank, node0_ip=NODE0_PLACEHOLDER, port=node_port(spec.port, node_rank))
    if spec.speculative is not None:
        context.update(asdict(spec.speculative))
    argv: list[str] = []
    keys: dict[str, str] = {}
    for field in ORDER:
        value = context[field]
        if not _wanted(field, value, spec):
            continue
        if field not in row.flags:
            raise KeyError(f"harness/sglang/versions.yaml: no flags for {field!r} (SGLang {row.version})")
        tokens = _expand(row.flags[field], value, context)
        argv += tokens
        keys.update({t: scenario_key(field) for t in tokens if t.startswith("--")})
    for token in spec.extra_args:
        if token.startswith("--"):
            keys.setdefault(token.split("=", 1)[0], "engine.extra_args")
    return argv + list(spec.extra_args), keys
