"""Per-node SGLang launch commands and environments from a plain deployment spec.

The plan is pure data: the same object is printed by `moe-harness plan`, validated against the
pinned SGLang's flags in CI, and handed to the per-node server actors, which fill in node 0's
address (known only once Ray has placed the bundles) and start the command.
"""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import yaml

from harness.sglang.secrets import mask_argv, mask_env

NODE0_PLACEHOLDER = "{node0_ip}"
ENV_DEFAULTS_PATH = Path(__file__).with_name("env_defaults.yaml")
DEFAULT_LAUNCHER = ("python3", "-m", "sglang.launch_server")
REPO_ROOT = Path(__file__).resolve().parents[2]


class PlanError(ValueError):
    """A deployment spec that cannot be turned into a launch plan."""


@dataclass(frozen=True)
class SpeculativeSpec:
    algorithm: str = "EAGLE"          # EAGLE or NEXTN (DeepSeek MTP)
    num_steps: int = 1
    eagle_topk: int = 1
    num_draft_tokens: int = 2


@dataclass(frozen=True)
class DeploymentSpec:
    """What one SGLang deployment needs; every field maps to a flag or an env var below."""
    model_path: str
    nodes: int = 1
    gpus_per_node: int = 8
    tp: int | None = None                  # default: every GPU of every node
    dp: int = 1
    ep: int = 1
    dp_attention: bool = False
    moe_a2a_backend: str | None = None     # "deepep"
    deepep_mode: str | None = None         # "low_latency" | "normal" | "auto"
    deepgemm: bool | None = None           # None: leave SGLang's default
    two_batch_overlap: bool = False
    attention_backend: str | None = None
    moe_runner_backend: str | None = None
    cuda_graph_bs: tuple[int, ...] = ()
    cuda_graph_max_bs: int | None = None
    load_format: str | None = None         # "dummy": random weights, no download
    speculative: SpeculativeSpec | None = None
    max_running_requests: int | None = None
    context_length: int | None = None
    mem_fraction_static: float | None = None
    trust_remote_code: bool = True
    enable_metrics: bool = True
    host: str = "0.0.0.0"
    port: int = 30000
    dist_init_port: int = 5000
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    passthrough_env: tuple[str, ...] = ("HF_TOKEN",)
    launcher: tuple[str, ...] = DEFAULT_LAUNCHER

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def tp_size(self) -> int:
        return self.tp or self.world_size


@dataclass(frozen=True)
class NodeLaunch:
    node_rank: int
    argv: tuple[str, ...]
    env: dict[str, str]

    def with_node0_ip(self, ip: str) -> "NodeLaunch":
        argv = tuple(a.replace(NODE0_PLACEHOLDER, ip) for a in self.argv)
        return replace(self, argv=argv)

    def server_args(self, launcher_len: int) -> list[str]:
        return list(self.argv[launcher_len:])


@dataclass(frozen=True)
class LaunchPlan:
    spec: DeploymentSpec
    nodes: tuple[NodeLaunch, ...]

    def expected_rank_files(self) -> dict[int, list[str]]:
        """Per node, the rank part of each trace name SGLang writes (TP-t[-DP-d][-EP-e])."""
        return expected_rank_labels(self.spec)

    def render(self) -> str:
        """Shell-ready text with secrets masked: what `moe-harness plan` prints."""
        lines = [f"# SGLang plan: {self.spec.nodes} node(s) x {self.spec.gpus_per_node} GPU(s), "
                 f"tp={self.spec.tp_size} dp={self.spec.dp} ep={self.spec.ep}"]
        if self.spec.nodes > 1:
            lines.append(f"# {NODE0_PLACEHOLDER} is node 0's IP, filled in once Ray places the nodes")
        for node in self.nodes:
            lines.append(f"\n# node {node.node_rank}")
            env = mask_env(node.env)
            lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
            lines.append(" \\\n    ".join(_command_lines(mask_argv(list(node.argv)))))
        return "\n".join(lines) + "\n"

    def to_manifest(self) -> dict:
        """JSON-able, secrets masked: what goes into the run directory."""
        return {"nodes": [{"node_rank": n.node_rank, "argv": mask_argv(list(n.argv)), "env": mask_env(n.env)}
                          for n in self.nodes]}


def _command_lines(argv: list[str]) -> list[str]:
    """The launcher on one line, then one --flag with its values per line."""
    first_flag = next((i for i, t in enumerate(argv) if t.startswith("--")), len(argv))
    groups = [argv[:first_flag]]
    for token in argv[first_flag:]:
        if token.startswith("--"):
            groups.append([token])
        else:
            groups[-1].append(token)
    return [" ".join(shlex.quote(t) for t in g) for g in groups if g]


@lru_cache(maxsize=1)
def _env_defaults() -> dict[str, dict[str, str]]:
    return yaml.safe_load(ENV_DEFAULTS_PATH.read_text())


def check_spec(spec: DeploymentSpec) -> None:
    problems = []
    if spec.nodes < 1 or spec.gpus_per_node < 1:
        problems.append("nodes and gpus_per_node must be >= 1")
    tp = spec.tp_size
    if tp % spec.nodes:
        problems.append(f"tp={tp} must be a multiple of nodes={spec.nodes} (one TP group spans the nodes)")
    if tp != spec.world_size:
        problems.append(f"tp={tp} must equal nodes x gpus_per_node = {spec.world_size}: "
                        "one server spans every GPU of every node")
    if tp % spec.dp:
        problems.append(f"dp={spec.dp} must divide tp={tp}")
    if spec.ep > 1 and tp % spec.ep:
        problems.append(f"ep={spec.ep} must divide tp={tp}")
    if spec.dp_attention and spec.dp < 2:
        problems.append("dp_attention needs dp >= 2")
    if spec.dp > 1 and not spec.dp_attention:
        problems.append("dp > 1 needs dp_attention: true (separate DP replicas are not planned here)")
    if spec.deepep_mode and spec.moe_a2a_backend != "deepep":
        problems.append("deepep_mode is set but moe_a2a_backend is not 'deepep'")
    if spec.two_batch_overlap and spec.moe_a2a_backend != "deepep":
        problems.append("two_batch_overlap needs moe_a2a_backend: deepep")
    if spec.speculative and spec.speculative.num_draft_tokens < 1:
        problems.append("speculative.num_draft_tokens must be >= 1")
    if problems:
        raise PlanError("; ".join(problems))


def _server_args(spec: DeploymentSpec, node_rank: int) -> list[str]:
    a = ["--model-path", spec.model_path, "--host", spec.host, "--port", str(spec.port),
         "--tp-size", str(spec.tp_size)]
    if spec.dp > 1:
        a += ["--dp-size", str(spec.dp)]
    if spec.ep > 1:
        a += ["--ep-size", str(spec.ep)]
    if spec.dp_attention:
        a.append("--enable-dp-attention")
    if spec.moe_a2a_backend:
        a += ["--moe-a2a-backend", spec.moe_a2a_backend]
    if spec.deepep_mode:
        a += ["--deepep-mode", spec.deepep_mode]
    if spec.moe_runner_backend:
        a += ["--moe-runner-backend", spec.moe_runner_backend]
    if spec.two_batch_overlap:
        a.append("--enable-two-batch-overlap")
    if spec.attention_backend:
        a += ["--attention-backend", spec.attention_backend]
    if spec.cuda_graph_bs:
        a += ["--cuda-graph-bs", *map(str, spec.cuda_graph_bs)]
    if spec.cuda_graph_max_bs:
        a += ["--cuda-graph-max-bs", str(spec.cuda_graph_max_bs)]
    if spec.load_format:
        a += ["--load-format", spec.load_format]
    if spec.speculative:
        s = spec.speculative
        a += ["--speculative-algorithm", s.algorithm, "--speculative-num-steps", str(s.num_steps),
              "--speculative-eagle-topk", str(s.eagle_topk),
              "--speculative-num-draft-tokens", str(s.num_draft_tokens)]
    if spec.max_running_requests:
        a += ["--max-running-requests", str(spec.max_running_requests)]
    if spec.context_length:
        a += ["--context-length", str(spec.context_length)]
    if spec.mem_fraction_static:
        a += ["--mem-fraction-static", str(spec.mem_fraction_static)]
    if spec.trust_remote_code:
        a.append("--trust-remote-code")
    if spec.enable_metrics:
        a.append("--enable-metrics")
    if spec.nodes > 1:
        a += ["--nnodes", str(spec.nodes), "--node-rank", str(node_rank),
              "--dist-init-addr", f"{NODE0_PLACEHOLDER}:{spec.dist_init_port}"]
    return a + list(spec.extra_args)


def _node_env(spec: DeploymentSpec, profile_dir: str, environ: dict[str, str]) -> dict[str, str]:
    d = _env_defaults()
    env = {k: v.format(profile_dir=profile_dir) for k, v in d["always"].items()}
    if spec.nodes > 1:
        env.update(d["multinode"])
    if spec.moe_a2a_backend == "deepep":
        env.update(d["deepep"])
        # DeepEP low-latency buffers are sized for this many tokens per rank per step.
        per_rank = spec.max_running_requests or 128
        if spec.dp_attention:
            per_rank = -(-per_rank // spec.dp)
        if spec.speculative:
            per_rank *= spec.speculative.num_draft_tokens
        env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] = str(max(128, per_rank))
    if spec.deepgemm is not None:
        env.update(d["deepgemm_on" if spec.deepgemm else "deepgemm_off"])
    env.update({k: str(v) for k, v in spec.env.items()})
    for name in spec.passthrough_env:
        if environ.get(name):
            env[name] = environ[name]
    return env


def build_plan(spec: DeploymentSpec, profile_dir: str = "/tmp/sglang-profile",
               environ: dict[str, str] | None = None) -> LaunchPlan:
    """One NodeLaunch per node; node 0's IP stays a placeholder until placement."""
    check_spec(spec)
    environ = dict(os.environ) if environ is None else environ
    launcher = tuple(a.replace("{python}", sys.executable).replace("{repo}", str(REPO_ROOT)) for a in spec.launcher)
    nodes = tuple(NodeLaunch(rank, launcher + tuple(_server_args(spec, rank)),
                             _node_env(spec, profile_dir, environ))
                  for rank in range(spec.nodes))
    return LaunchPlan(spec, nodes)


def rank_label(tp_rank: int, spec: DeploymentSpec) -> str:
    """Rank part of SGLang's trace file name for one TP rank (profiler_manager naming)."""
    parts = [f"TP-{tp_rank}"]
    if spec.dp > 1:
        parts.append(f"DP-{tp_rank // (spec.tp_size // spec.dp)}")
    if spec.ep > 1:
        parts.append(f"EP-{tp_rank // (spec.tp_size // spec.ep)}")
    return "-".join(parts)


def expected_rank_labels(spec: DeploymentSpec) -> dict[int, list[str]]:
    g = spec.gpus_per_node
    return {n: [rank_label(n * g + i, spec) for i in range(g)] for n in range(spec.nodes)}
