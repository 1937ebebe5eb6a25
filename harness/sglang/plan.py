"""Per-node SGLang launch commands and environments from a plain deployment spec.

The plan is pure data for one SGLang release (versions.yaml): the same object is printed by
`moe-harness plan`, checked against that release's flags offline, checked by SGLang's own parser on
every node before launch, and handed to the per-node server actors, which fill in node 0's address
(known only once Ray has placed the bundles) and start the command.
"""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import yaml

from harness.env_names import RULE as ENV_RULE, bad_env_names
from harness.argv_tokens import extra_arg_values
from harness.sglang.argv_rules import argv_problems
from harness.sglang.launch_flags import release_flag_table
from harness.sglang.render import NODE0_PLACEHOLDER, render_server_args
from harness.node.secrets import Secrets
from harness.sglang.version import SGLangVersion, load_version

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
    tp: int | None = None                  # default: every GPU of every node (over pp)
    pp: int = 1                            # pipeline stages; tp x pp = every GPU of every node
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
    chunked_prefill_size: int | None = None  # None: SGLang's default, or the DeepEP low-latency budget
    context_length: int | None = None
    mem_fraction_static: float | None = None
    trust_remote_code: bool = True
    enable_metrics: bool = True
    host: str = "0.0.0.0"
    port: int = 30000
    dist_init_port: int = 5000
    extra_args: tuple[str, ...] = ()
    capture_traces: bool = False           # CUDA-graph capture traces at start (profile.capture_traces)
    expert_load: bool = False              # expert-distribution recorder over the profiled window (profile.expert_load)
    profiler: str = "auto"                 # auto | v2 | v1 | plain: which SGLang profiler records the decode steps
    profile_stage: str = "DECODE"          # DECODE | EXTEND (profile.stages): EXTEND takes the classic plain window
    env: dict[str, str] = field(default_factory=dict)
    passthrough_env: tuple[str, ...] = ("HF_TOKEN",)
    launcher: tuple[str, ...] = DEFAULT_LAUNCHER
    batch_size: int | None = None          # workload.batch_size: requests in flight over every DP group

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def scheduler_batch(self) -> tuple[int, int] | None:
        """(fewest, most) requests one scheduler's decode batch holds at the scenario's batch: with DP
        attention the requests are spread over the dp groups, each with its own scheduler and batch
        (the `bs=` of its step labels). None: unknown (no batch given, or pipeline micro-batches)."""
        if self.batch_size is None or self.pp > 1:
            return None
        groups = self.dp if self.dp_attention else 1
        return self.batch_size // groups, -(-self.batch_size // groups)

    @property
    def tp_size(self) -> int:
        return self.tp or self.world_size // self.pp


@dataclass(frozen=True)
class NodeLaunch:
    node_rank: int
    argv: tuple[str, ...]
    env: dict[str, str]
    flag_keys: dict[str, str] = field(default_factory=dict)   # --flag -> the scenario key it came from
    secret_values: tuple[str, ...] = ()    # masked by value in its log and messages (harness/node/secrets.py)

    @property
    def secrets(self) -> Secrets:
        return Secrets(self.secret_values)

    def with_node0_ip(self, ip: str) -> "NodeLaunch":
        argv = tuple(a.replace(NODE0_PLACEHOLDER, ip) for a in self.argv)
        return replace(self, argv=argv)

    def server_args(self, launcher_len: int) -> list[str]:
        return list(self.argv[launcher_len:])


@dataclass(frozen=True)
class LaunchPlan:
    spec: DeploymentSpec
    nodes: tuple[NodeLaunch, ...]
    sglang: SGLangVersion
    profiler: str                          # v2, v1 or plain, resolved for this release

    @property
    def launcher_len(self) -> int:
        return len(self.spec.launcher)

    @property
    def decode_stage(self) -> str | None:
        """The stage in the decode traces' file names: V2's lower-case stage, the classic by-stage profiler's
        suffix, or None for a plain window (its files carry no stage)."""
        profile = self.sglang.profile
        if self.profiler == "plain":
            return None
        return profile["v2_decode_stage"] if self.profiler == "v2" else profile["v1_decode_suffix"]

    def expected_rank_files(self) -> dict[int, list[str]]:
        """Per node, the rank part of each trace name SGLang writes (TP-t[-DP-d][-PP-p][-EP-e])."""
        return expected_rank_labels(self.spec)

    @property
    def secrets(self) -> Secrets:
        """Every node's secret values: masked wherever the plan is written or printed."""
        return Secrets(v for node in self.nodes for v in node.secret_values)

    def render(self) -> str:
        """Shell-ready text with secrets masked by value: what `moe-harness plan` prints."""
        lines = [f"# SGLang {self.sglang.version} plan: {self.spec.nodes} node(s) x {self.spec.gpus_per_node} GPU(s), "
                 f"tp={self.spec.tp_size} pp={self.spec.pp} dp={self.spec.dp} ep={self.spec.ep}, "
                 f"profiler {self.profiler}"]
        if self.spec.nodes > 1:
            lines.append(f"# {NODE0_PLACEHOLDER} is node 0's IP, filled in once Ray places the nodes")
        secrets = self.secrets
        for node in self.nodes:
            lines.append(f"\n# node {node.node_rank}")
            env = secrets.env(node.env, self.spec.passthrough_env)
            lines += [f"export {shlex.quote(k)}={shlex.quote(v)}" for k, v in sorted(env.items())]
            lines.append(" \\\n    ".join(_command_lines(secrets.argv(node.argv))))
        return "\n".join(lines) + "\n"

    def to_manifest(self) -> dict:
        """JSON-able, secrets masked by value: what goes into the run directory."""
        secrets = self.secrets
        return {"sglang_version": self.sglang.version, "profiler": self.profiler,
                "nodes": [{"node_rank": n.node_rank, "argv": secrets.argv(n.argv),
                           "env": secrets.env(n.env, self.spec.passthrough_env),
                           "flag_keys": secrets.data(n.flag_keys)} for n in self.nodes]}


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
    if spec.pp < 1:
        problems.append("pp must be >= 1")
    elif tp * spec.pp != spec.world_size:
        problems.append(f"tp={tp} x pp={spec.pp} must equal nodes x gpus_per_node = {spec.world_size}: "
                        "one server spans every GPU of every node")
    elif spec.nodes % spec.pp and spec.pp % spec.nodes:
        problems.append(f"pp={spec.pp} and nodes={spec.nodes}: one must divide the other (SGLang places whole "
                        "pipeline stages, or whole nodes per stage)")
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
    if spec.profiler not in ("auto", "v1", "v2", "plain"):
        problems.append(f"profiler {spec.profiler!r} must be auto, v1, v2 or plain")
    for key, names in (("engine.env", spec.env), ("engine.passthrough_env", spec.passthrough_env)):
        if bad := bad_env_names(names):
            problems.append(f"{key}: {', '.join(map(repr, bad))}: not a variable name ({ENV_RULE})")
    if problems:
        raise PlanError("; ".join(problems))


def _node_env(spec: DeploymentSpec, profile_dir: str, environ: dict[str, str], row: SGLangVersion,
              profiler: str) -> dict[str, str]:
    d = _env_defaults()
    env = {k: v.format(profile_dir=profile_dir) for k, v in d["always"].items()}
    if profiler == "v2":
        env.update(row.profile["v2_env"])
    min_bs_env = row.profile.get("decode_min_bs_env")
    if profiler == "v1" and min_bs_env and spec.scheduler_batch:
        # The classic by-stage profiler waits for a decode batch this large before its decode capture
        # (profiler_manager.py, from 0.5.20); V2 never reads it. The fewest a scheduler holds, so no
        # scheduler waits for a batch it never gets.
        env[min_bs_env] = str(spec.scheduler_batch[0])
    if spec.capture_traces:
        env.update(row.capture_trace.env)
    if spec.expert_load:
        env[row.expert_record["dir_env"]] = expert_record_dir(profile_dir)
    if spec.nodes > 1:
        env.update(d["multinode"])
    if spec.moe_a2a_backend == "deepep":
        env.update(d["deepep"])
        env[DEEPEP_BUDGET_ENV] = str(deepep_dispatch_budget(spec))
    if spec.deepgemm is not None:
        env.update(d["deepgemm_on" if spec.deepgemm else "deepgemm_off"])
    env.update({k: _placeholders(str(v)) for k, v in spec.env.items()})
    for name in spec.passthrough_env:
        if environ.get(name):
            env[name] = environ[name]
    return env


DEEPEP_BUDGET_ENV = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"


def deepep_dispatch_budget(spec: DeploymentSpec) -> int:
    """Tokens one rank may hand DeepEP's low-latency dispatch in one forward pass (the buffers are sized
    for it; more is an assertion in deep_ep.cpp that ends the scheduler): the scenario's own
    engine.env value (a positive whole number: 0 or less sizes no buffer at all), else enough for the
    decode batch a rank can hold (at least SGLang's 128), rounded up to a multiple of 128."""
    if DEEPEP_BUDGET_ENV in spec.env:
        raw, key = spec.env[DEEPEP_BUDGET_ENV], f"engine.env.{DEEPEP_BUDGET_ENV}"
        try:
            budget = int(raw)
        except ValueError:
            raise PlanError(f"{key}: {raw!r} is not a whole number") from None
        if budget < 1:
            raise PlanError(f"{key}: {raw!r}: the dispatch budget is a positive number of tokens per rank")
        return budget
    per_rank = spec.max_running_requests or 128
    if spec.dp_attention:
        per_rank = -(-per_rank // spec.dp)
    if spec.speculative:
        per_rank *= spec.speculative.num_draft_tokens
    # A multiple of 128: the prefill chunk derived from it must stay a multiple of the KV page size
    # (SGLang asserts it; 64 for FlashMLA).
    return max(128, -(-per_rank // 128) * 128)


CHUNKED_PREFILL_FLAG = "--chunked-prefill-size"
# SGLang's --chunked-prefill-size -1 turns chunking off: each prompt is prefilled in one pass
# (server_args.py's help and its own `chunked_prefill_size = -1` settings, every supported release).
NO_CHUNKING = -1


def chunked_prefill_asks(spec: DeploymentSpec) -> list[tuple[str, int]]:
    """(scenario key, tokens) of every prefill chunk the deployment asks for: engine.chunked_prefill_size,
    then each --chunked-prefill-size of engine.extra_args (either spelling). A chunk is a positive
    number of tokens, or -1 in extra_args (SGLang's own "no chunking"); anything else is a PlanError."""
    asks = []
    if spec.chunked_prefill_size is not None:
        if spec.chunked_prefill_size < 1:
            raise PlanError(f"engine.chunked_prefill_size = {spec.chunked_prefill_size}: a prefill chunk is a "
                            "positive number of tokens")
        asks.append(("engine.chunked_prefill_size", spec.chunked_prefill_size))
    key = f"engine.extra_args {CHUNKED_PREFILL_FLAG}"
    for raw in extra_arg_values(spec.extra_args, CHUNKED_PREFILL_FLAG):
        if raw is None:
            raise PlanError(f"{key}: needs a value (tokens per prefill chunk)")
        try:
            tokens = int(raw)
        except ValueError:
            raise PlanError(f"{key}: {raw!r} is not a whole number") from None
        if tokens < 1 and tokens != NO_CHUNKING:
            raise PlanError(f"{key} = {tokens}: a prefill chunk is a positive number of tokens "
                            f"({NO_CHUNKING}: SGLang prefills each prompt whole)")
        asks.append((key, tokens))
    return asks


def with_safe_prefill(spec: DeploymentSpec) -> DeploymentSpec:
    """DeepEP's low-latency mode sends prefill tokens through the same fixed-size buffers as decode: a
    prefill with more tokens on a rank than the dispatch budget kills the scheduler (seen with SGLang
    0.5.17: 8 prompts of 128 tokens against a 128-token budget). So prefill is chunked within the
    budget (SGLang's --chunked-prefill-size caps the tokens of one extend batch on a scheduler, and a
    rank never holds more than its scheduler's batch); every chunk the scenario asks for, in its field
    or in extra_args, either spelling, each time, must fit (argparse keeps the last of several, and a
    value given twice is refused by argv_rules, but none may slip past this guard); -1 (no chunking)
    is refused. `auto` mode prefills with DeepEP's normal kernels and needs no cap."""
    asks = chunked_prefill_asks(spec)
    if spec.moe_a2a_backend != "deepep" or spec.deepep_mode != "low_latency":
        return spec
    budget = deepep_dispatch_budget(spec)
    # Under DP attention SGLang divides --chunked-prefill-size by dp (server_args.py, every supported
    # release): each DP group's scheduler prefills at most size // dp tokens, and that must fit the budget.
    groups = spec.dp if spec.dp_attention else 1
    if not asks:
        return replace(spec, chunked_prefill_size=budget * groups)
    for key, asked in asks:
        per_group = f" ({asked // groups} per DP group: SGLang divides it by dp)" if groups > 1 and asked > 0 else ""
        if asked == NO_CHUNKING or asked // groups > budget:
            what = " (no chunking: whole prompts)" if asked == NO_CHUNKING else per_group
            raise PlanError(f"{key} = {asked}{what}: DeepEP low-latency mode dispatches at most {budget} tokens per "
                            f"rank ({DEEPEP_BUDGET_ENV}), so a longer prefill chunk would end the server at its first "
                            f"long prefill; use at most {budget * groups}, raise engine.env.{DEEPEP_BUDGET_ENV}, or use "
                            "engine.deepep_mode: auto")
        if asked // groups < 1:
            raise PlanError(f"{key} = {asked}{per_group}: each of the {groups} DP groups would prefill no token per "
                            f"chunk; use at least {groups}")
    return spec


def expert_record_dir(profile_dir: str) -> str:
    """Where the node's SGLang dumps the expert distribution (its traces' folder's sibling)."""
    return f"{profile_dir.rstrip('/')}-expert-load"


def _placeholders(text: str) -> str:
    """{python} and {repo}: the driver's interpreter and checkout (test launchers and their env)."""
    return text.replace("{python}", sys.executable).replace("{repo}", str(REPO_ROOT))


def resolve_profiler(spec: DeploymentSpec, row: SGLangVersion) -> str:
    """v2 where the release has profile V2 (decode stages, no stray EXTEND capture), else v1; a prefill
    (EXTEND) profile always takes v1's plain window: V2 stops at the first decode step between two prefills."""
    if spec.profiler == "plain":
        return "plain"
    if spec.profile_stage == "EXTEND":
        if spec.profiler == "v2":
            raise PlanError("profile.sglang_profiler: v2 cannot profile EXTEND steps (it stops at the first decode "
                            "step); use auto or v1")
        return "v1"
    if spec.profiler == "auto":
        return "v2" if row.profile.get("v2_env") else "v1"
    if spec.profiler == "v2" and not row.profile.get("v2_env"):
        raise PlanError(f"profile.sglang_profiler: v2 needs SGLang's profile V2, which {row.version} does not have")
    return spec.profiler


def build_plan(spec: DeploymentSpec, profile_dir: str = "/tmp/sglang-profile",
               environ: dict[str, str] | None = None, version: str | SGLangVersion | None = None) -> LaunchPlan:
    """One NodeLaunch per node for one SGLang release (default: versions.yaml's); node 0's IP stays a
    placeholder until placement."""
    check_spec(spec)
    spec = with_safe_prefill(spec)
    row = version if isinstance(version, SGLangVersion) else load_version(version)
    table = release_flag_table(row.version)
    if spec.capture_traces and row.capture_trace is None:
        raise PlanError(f"profile.capture_traces: SGLang {row.version} writes no CUDA-graph capture traces "
                        "(0.5.17 writes one per runner, 0.5.23 one per batch size)")
    profiler = resolve_profiler(spec, row)
    environ = dict(os.environ) if environ is None else environ
    launcher = tuple(_placeholders(a) for a in spec.launcher)
    nodes = []
    for rank in range(spec.nodes):
        argv, keys = render_server_args(spec, rank, row)
        argv, env = launcher + tuple(argv), _node_env(spec, profile_dir, environ, row, profiler)
        secrets = Secrets.of_launch(env, argv, spec.passthrough_env)
        planned = list(argv[len(launcher):len(argv) - len(spec.extra_args)])
        if problems := argv_problems(spec, row, planned, keys, table):
            raise PlanError(secrets.text("; ".join(problems)))
        nodes.append(NodeLaunch(rank, argv, env, keys, tuple(sorted(secrets.values))))
    return LaunchPlan(spec, tuple(nodes), row, profiler)


def node_ranges(spec: DeploymentSpec, node_rank: int) -> tuple[range, range]:
    """(pp ranks, tp ranks) one node holds, as SGLang's engine._calculate_rank_ranges places them."""
    pp_per_node = max(spec.pp // spec.nodes, 1)
    nodes_per_pp = max(spec.nodes // spec.pp, 1)
    pp_start = pp_per_node * (node_rank // nodes_per_pp)
    tp_per_node = spec.tp_size // nodes_per_pp
    tp_start = tp_per_node * (node_rank % nodes_per_pp)
    return range(pp_start, pp_start + pp_per_node), range(tp_start, tp_start + tp_per_node)


def rank_label(tp_rank: int, spec: DeploymentSpec, pp_rank: int = 0) -> str:
    """Rank part of SGLang's trace file name (profiler_manager: TP-t[-DP-d][-PP-p][-EP-e])."""
    parts = [f"TP-{tp_rank}"]
    if spec.dp > 1:
        parts.append(f"DP-{tp_rank // (spec.tp_size // spec.dp)}")
    if spec.pp > 1:
        parts.append(f"PP-{pp_rank}")
    if spec.ep > 1:
        parts.append(f"EP-{tp_rank // (spec.tp_size // spec.ep)}")
    return "-".join(parts)


def expected_rank_labels(spec: DeploymentSpec) -> dict[int, list[str]]:
    labels = {}
    for node in range(spec.nodes):
        pps, tps = node_ranges(spec, node)
        labels[node] = [rank_label(t, spec, p) for p in pps for t in tps]
    return labels
