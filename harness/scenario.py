"""Scenario files: one YAML per benchmark scenario, checked strictly before anything starts.

Why strict: a typo in a key (`num_step`) or a combination that cannot run (a CUDA engine on a
cluster with no GPUs) must fail in a second on the laptop, not after an hour of cluster time.
Every error names the file, the key path and, when known, the line.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.env_names import RULE as ENV_RULE, bad_env_names

REPO_ROOT = Path(__file__).resolve().parent.parent
# The shipped scenarios: harness/scenarios links to the checkout's scenarios/ (resolved, so paths read
# scenarios/NAME.yaml as before) and is a folder of files in an installed wheel, where no checkout exists.
SCENARIOS_DIR = (Path(__file__).parent / "scenarios").resolve()
EMBEDDED_PRESETS_PATH = Path(__file__).resolve().parent / "engines" / "embedded" / "presets.yaml"


# C0 controls (NUL, tab, newline, ESC, ...), DEL and the C1 controls.
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def no_control_characters(value: str) -> str:
    """Why: a string that becomes a server's argument, an environment value or a path cannot hold a NUL
    (exec refuses it: the server fails to start, after placement) and gains nothing from other control
    characters but a garbled log, plan or terminal; refused here, where the key and line are known."""
    found = CONTROL_CHARACTER.search(value)
    if found:
        raise ValueError(f"control character U+{ord(found.group()):04X} at character {found.start() + 1}: not allowed "
                         "in a command-line argument, environment value or path")
    return value


ArgText = Annotated[str, AfterValidator(no_control_characters)]  # becomes an argv element, env value or path


class ScenarioError(Exception):
    """A scenario cannot be used: says which file, which key and what is wrong."""

    def __init__(self, source: str, problems: list[str]):
        self.source = str(source)
        self.problems = problems
        body = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"scenario {self.source}:\n{body}")

    def lines(self) -> list[str]:
        """One line per problem, each naming the file: what a command prints."""
        return [f"{self.source}: {problem}" for problem in self.problems]


class _Strict(BaseModel):
    # strict: `batch_size: true` is not the number 1, `deepgemm: 1` not true (YAML already gives real types)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Cluster(_Strict):
    """The machines the scenario needs."""

    nodes: int = Field(1, ge=1, description="number of nodes (one engine actor per node)")
    gpus_per_node: int = Field(0, ge=0, description="GPUs per node; 0 for a CPU-only run")
    gpu_type: str | None = Field(None, description="e.g. H200, H800, B200; informational, recorded in the manifest")


class FaultInjection(_Strict):
    """Deliberate failures, for testing the harness's failure handling only."""

    exit_at_step: int | None = Field(None, ge=0, description="the engine process exits at this decode step")
    drop_trace: bool = Field(False, description="the profiler runs but no trace file is written")


class EmbeddedEngine(_Strict):
    """transformers' DeepseekV3ForCausalLM with random weights, run in-process by a Ray actor."""

    kind: Literal["embedded"]
    preset: str = Field("tiny-cpu", description="a model size preset from harness/engines/embedded/presets.yaml")
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    experts_implementation: Literal["grouped_mm", "batched_mm", "eager"] = Field(
        "grouped_mm", description="transformers' experts kernel: grouped_mm runs all experts as grouped GEMMs"
    )
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    seed: int = 0
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's choice)")
    start_timeout_s: float = Field(300.0, gt=0, description="bound on building the model")
    fault_injection: FaultInjection | None = None


class SGLangSpeculative(_Strict):
    """SGLang speculative decoding (DeepSeek MTP runs as EAGLE / NEXTN on the model's NextN layer)."""

    algorithm: Literal["EAGLE", "NEXTN", "EAGLE3"] = "EAGLE"
    num_steps: int = Field(3, ge=1, description="--speculative-num-steps")
    eagle_topk: int = Field(1, ge=1, description="--speculative-eagle-topk")
    num_draft_tokens: int = Field(4, ge=1, description="--speculative-num-draft-tokens")


def variable_names_only(value):
    """Names of environment variables only (harness/env_names.py says why); the value as given."""
    bad = bad_env_names(value)
    if bad:
        raise ValueError(f"{', '.join(map(repr, bad))}: not a variable name ({ENV_RULE})")
    return value


class PDRole(_Strict):
    """One role of a prefill/decode (PD) pair: its share of the cluster's nodes, and the engine keys it sets
    its own way (unset keys are the engine's). Each role is one SGLang server over its nodes."""
    nodes: int = Field(1, ge=1, description="nodes of this role (the roles' nodes sum to cluster.nodes)")
    tp: int | None = Field(None, ge=1, description="--tp-size of this role (default: the engine's tp)")
    dp: int | None = Field(None, ge=1)
    ep: int | None = Field(None, ge=1)
    dp_attention: bool | None = None
    deepep_mode: Literal["low_latency", "normal", "auto"] | None = Field(
        None, description="prefill: normal (large batches), decode: low_latency (CUDA graphs), as SGLang's PD guide")
    two_batch_overlap: bool | None = None
    attention_backend: ArgText | None = None
    cuda_graph_bs: list[int] | None = None
    cuda_graph_max_bs: int | None = Field(None, ge=1)
    max_running_requests: int | None = Field(None, ge=1)
    chunked_prefill_size: int | None = Field(None, ge=1)
    mem_fraction_static: float | None = Field(None, gt=0, lt=1)
    port: int | None = Field(None, ge=1, le=65535, description="HTTP port of the role's node 0 (default: the engine's "
                             "port for prefill, port + 100 for decode)")
    dist_init_port: int | None = Field(None, ge=1, le=65535, description="default: the engine's for prefill, + 100 "
                                       "for decode")
    extra_args: list[ArgText] = Field(default_factory=list, description="launch_server arguments of this role only, "
                                      "after the engine's")
    env: dict[str, ArgText] = Field(default_factory=dict, description="environment of this role only, over the engine's")

    _variable_names = field_validator("env")(classmethod(lambda cls, value: variable_names_only(value)))


class PDRouter(_Strict):
    """SGLang's router (the sglang-router package) in PD mode: each request goes to a prefill and a decode
    server with one bootstrap room; the load is driven through it."""
    port: int = Field(8000, ge=1, le=65535, description="the router's HTTP port")
    prometheus_port: int = Field(29000, ge=1, le=65535, description="--prometheus-port: where the router serves "
                                 "its own metrics (it ends at start when the port is taken)")
    extra_args: list[ArgText] = Field(default_factory=list, description="further launch_router arguments, verbatim "
                                  "(e.g. --prefill-policy, --decode-policy)")
    ready_timeout_s: float = Field(300.0, gt=0, description="bound on the router listing every prefill and decode server as a healthy worker")
    launcher: list[ArgText] | None = Field(
        None, description="replaces `python3 -m sglang_router.launch_router` ({python}: the driver's Python)")


class SGLangDisaggregation(_Strict):
    """Prefill/decode disaggregation: prefill and decode on separate servers (SGLang's
    --disaggregation-mode), the KV cache sent between them by a transfer backend, a router in front."""
    transfer_backend: ArgText = Field("mooncake", min_length=1, description="--disaggregation-transfer-backend: mooncake "
                                  "(RDMA; MOONCAKE_PROTOCOL=tcp in engine.env without RDMA) or nixl")
    bootstrap_port: int = Field(8998, ge=1, le=65535, description="--disaggregation-bootstrap-port of the prefill "
                                "server, where the decode side's handshake goes")
    ib_device: ArgText | None = Field(None, min_length=1, description="--disaggregation-ib-device: the RDMA NICs "
                                  "(mlx5_0,mlx5_1,...)")
    prefill: PDRole = Field(default_factory=PDRole)
    decode: PDRole = Field(default_factory=PDRole)
    router: PDRouter = Field(default_factory=PDRouter)


class SGLangEngine(_Strict):
    """An SGLang server launched on every node (the multi-node deployment path)."""

    kind: Literal["sglang"]
    model_path: ArgText = Field(..., description="Hugging Face id or local path of the served model")
    tp: int = Field(1, ge=1, description="tensor-parallel size (--tp-size)")
    pp: int = Field(1, ge=1, description="pipeline-parallel size (--pp-size); tp x pp = every GPU")
    dp: int = Field(1, ge=1, description="attention data-parallel groups, with dp_attention")
    ep: int = Field(1, ge=1, description="expert-parallel size (--ep-size)")
    extra_args: list[ArgText] = Field(default_factory=list, description="further launch_server arguments, verbatim")
    dp_attention: bool = Field(False, description="DP attention over dp groups (needs dp > 1): --attn-dp-size "
                               "from SGLang 0.5.23, --dp-size with --enable-dp-attention before")
    moe_a2a_backend: Literal["deepep"] | None = Field(None, description="--moe-a2a-backend")
    deepep_mode: Literal["low_latency", "normal", "auto"] | None = Field(None, description="--deepep-mode")
    deepgemm: bool | None = Field(None, description="SGLANG_ENABLE_JIT_DEEPGEMM; None keeps SGLang's default")
    two_batch_overlap: bool = Field(False, description="--enable-two-batch-overlap")
    attention_backend: ArgText | None = Field(None, description="--attention-backend")
    moe_runner_backend: ArgText | None = Field(None, description="--moe-runner-backend")
    cuda_graph_bs: list[int] = Field(default_factory=list, description="decode CUDA-graph batch sizes "
                                     "(--cuda-graph-bs-decode from 0.5.17, --cuda-graph-bs before)")
    cuda_graph_max_bs: int | None = Field(None, ge=1, description="largest decode CUDA-graph batch size "
                                          "(--cuda-graph-max-bs-decode from 0.5.17, --cuda-graph-max-bs before)")
    load_format: ArgText | None = Field(None, description="--load-format (dummy: random weights)")
    speculative: SGLangSpeculative | None = Field(None, description="MTP / EAGLE speculative decoding")
    max_running_requests: int | None = Field(None, ge=1, description="--max-running-requests")
    chunked_prefill_size: int | None = Field(None, ge=1, description="--chunked-prefill-size; with DeepEP "
                                             "low-latency mode at most the dispatch budget, which is the default")
    context_length: int | None = Field(None, ge=1, description="--context-length")
    mem_fraction_static: float | None = Field(None, gt=0, lt=1, description="--mem-fraction-static")
    host: ArgText = Field("0.0.0.0", description="--host of node 0's server; the driver connects to node 0's IP "
                      "unless this names one address")
    port: int = Field(30000, ge=1, le=65535, description="HTTP port of node 0's server (node r binds port + r)")
    dist_init_port: int = Field(5000, ge=1, le=65535, description="port of node 0's --dist-init-addr, where "
                                "the nodes' processes meet (multi-node)")
    env: dict[str, ArgText] = Field(default_factory=dict, description="extra environment for every node")
    passthrough_env: list[str] = Field(["HF_TOKEN"], description="driver variables copied to the servers (masked in logs)")
    ready_timeout_s: float = Field(1800.0, gt=0, description="bound on weight loading + CUDA-graph capture")
    disaggregation: SGLangDisaggregation | None = Field(
        None, description="prefill/decode disaggregation: a prefill server and a decode server, each over its "
        "own nodes, and SGLang's router in front (docs/run.md)")
    launcher: list[ArgText] | None = Field(
        None, description="TEST ONLY: replaces `python3 -m sglang.launch_server` (the tests start their fake "
        "server this way); {python} is the driver's Python, {repo} the harness checkout on the driver "
        "(both also filled in engine.env values)")

    _variable_names = field_validator("env", "passthrough_env")(classmethod(lambda cls, value: variable_names_only(value)))


Engine = Annotated[EmbeddedEngine | SGLangEngine, Field(discriminator="kind")]


class Model(_Strict):
    """What is served. For the embedded engine, optional overrides of the preset's shape."""

    name: str = Field(..., min_length=1, pattern=r"\S",
                      description="what reports call the model (required: a default would mislabel runs)")
    num_layers: int | None = Field(None, ge=1, description="decoder layers (embedded: overrides the preset)")
    first_k_dense_replace: int | None = Field(None, ge=0, description="leading dense (non-MoE) layers")
    n_routed_experts: int | None = Field(None, ge=1, description="routed experts per MoE layer")
    num_experts_per_tok: int | None = Field(None, ge=1, description="experts each token is routed to")
    n_group: int | None = Field(None, ge=1, description="expert groups for grouped top-k")
    topk_group: int | None = Field(None, ge=1, description="groups each token may pick experts from")


class Workload(_Strict):
    """The load: a batch of requests decoded together until the step time is steady."""

    batch_size: int = Field(4, ge=1, description="concurrent requests (decode batch size)")
    input_len: int = Field(16, ge=1, description="prompt tokens per request")
    output_len: int = Field(32, ge=1, description="tokens generated per request")
    warmup_steps: int = Field(3, ge=0, description="decode steps always run before steady-state checks")
    steady_window: int = Field(3, ge=2, description="consecutive decode steps compared for steady state")
    steady_rel_spread: float = Field(
        0.5, ge=0.0, description="steady when (max - min) / median step time over the window is at most this"
    )
    max_warmup_steps: int = Field(20, ge=1, description="give up (run failed) if not steady after this many steps")


class Profile(_Strict):
    num_steps: int = Field(3, ge=1, description="decode steps recorded by the profiler (EXTEND: forward passes of "
                           "the plain window)")
    stages: list[Literal["DECODE", "EXTEND"]] = Field(
        default_factory=lambda: ["DECODE"], description="SGLang: DECODE (the decode-only window), or EXTEND (a "
        "plain window of num_steps forward passes while the load keeps arriving: the table describes its "
        "prefill steps; a short workload.output_len makes most passes prefills)")
    sglang_profiler: Literal["auto", "v2", "v1", "plain"] = Field(
        "auto", description="SGLang: v2 = SGLANG_PROFILE_V2 with decode stages; v1 = the classic by-stage "
        "profiler, stopped with /stop_profile on every exit; plain = the classic profiler's plain window of "
        "num_steps passes after the same pause (a PD decode role's choice under auto); auto = v2 where the "
        "release has it")
    capture_traces: bool = Field(False, description="SGLang: also keep the CUDA-graph capture traces the server "
                                 "writes while it starts (0.5.23: one per batch size, with module stacks)")
    expert_load: bool = Field(False, description="SGLang: record the expert distribution over the profiled window "
                              "(start, stop, dump) and show per MoE layer the busiest expert's tokens against the mean")
    record_shapes: bool = True
    with_stack: bool = True
    timeout_s: float = Field(300.0, gt=0, description="bound on the profiled steps plus the trace export")


class Analysis(_Strict):
    signature: ArgText = Field("generic", description="built-in signature name or a YAML path")
    model: ArgText | None = Field(None, description="model spec name (deepseek-v3) or YAML path; None: inferred")
    rank_policy: str = Field("mean", pattern=r"^(mean|max|rank:.+)$", description="mean | max | rank:LABEL")

    @field_validator("signature")
    @classmethod
    def _signature_loads(cls, value: str) -> str:
        """Checked now: the analysis would refuse it only after deployment and profile."""
        from analysis.api import AnalysisError, check_input

        try:
            check_input("signature", value)
        except AnalysisError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("model")
    @classmethod
    def _model_loads(cls, value: str | None) -> str | None:
        from analysis.api import AnalysisError, check_input

        if value is not None:
            try:
                check_input("model", value)
            except AnalysisError as exc:
                raise ValueError(str(exc)) from None
        return value


class Outputs(_Strict):
    keep_traces: bool = Field(True, description="copy raw traces into the run directory")
    trace_prefix: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$",
                                     description="trace file prefix (default: the run directory's name)")


class Scenario(_Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="used in the run directory's name")
    description: str = ""
    cluster: Cluster = Field(default_factory=Cluster)
    engine: Engine
    model: Model = Field(..., description="what is served; at least its name")
    workload: Workload = Field(default_factory=Workload)
    profile: Profile = Field(default_factory=Profile)
    analysis: Analysis = Field(default_factory=Analysis)
    outputs: Outputs = Field(default_factory=Outputs)

    @model_validator(mode="after")
    def _combinations(self) -> "Scenario":
        problems = combination_problems(self)
        if problems:
            # Raised as ValueError so pydantic reports it; load_scenario re-words it with the file.
            raise ValueError("; ".join(problems))
        return self


def load_embedded_presets(path: Path = EMBEDDED_PRESETS_PATH) -> dict[str, dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    return data["presets"]


def embedded_model_config(scenario: Scenario) -> dict[str, Any]:
    """The DeepseekV3Config keyword arguments: the preset with the scenario's model overrides."""
    assert isinstance(scenario.engine, EmbeddedEngine)
    presets = load_embedded_presets()
    config = dict(presets[scenario.engine.preset]["config"])
    overrides = {
        "num_hidden_layers": scenario.model.num_layers,
        "first_k_dense_replace": scenario.model.first_k_dense_replace,
        "n_routed_experts": scenario.model.n_routed_experts,
        "num_experts_per_tok": scenario.model.num_experts_per_tok,
        "n_group": scenario.model.n_group,
        "topk_group": scenario.model.topk_group,
    }
    config.update({k: v for k, v in overrides.items() if v is not None})
    return config


def combination_problems(s: Scenario) -> list[str]:
    """Settings that are valid one by one but cannot run together. Each message names its keys."""
    problems: list[str] = []
    w, p = s.workload, s.profile
    if w.warmup_steps + w.steady_window > w.max_warmup_steps:
        problems.append(
            f"workload.warmup_steps ({w.warmup_steps}) + workload.steady_window ({w.steady_window}) exceeds "
            f"workload.max_warmup_steps ({w.max_warmup_steps}): steady state could never be checked"
        )
    if isinstance(s.engine, EmbeddedEngine):
        e = s.engine
        if e.preset not in load_embedded_presets():
            known = ", ".join(sorted(load_embedded_presets()))
            problems.append(f"engine.preset: unknown preset {e.preset!r} (known: {known})")
            return problems
        if s.cluster.nodes != 1:
            problems.append(f"cluster.nodes is {s.cluster.nodes}: the embedded engine runs on one node")
        if e.device == "cuda" and s.cluster.gpus_per_node < 1:
            problems.append("engine.device is cuda but cluster.gpus_per_node is 0")
        if e.device == "cpu" and e.dtype == "float16":
            problems.append("engine.dtype float16 is not supported with engine.device cpu (use float32 or bfloat16)")
        if "EXTEND" in p.stages:
            problems.append("profile.stages: the embedded engine profiles DECODE only")
        if p.capture_traces:
            problems.append("profile.capture_traces: CUDA-graph capture traces are an SGLang feature")
        if p.expert_load:
            problems.append("profile.expert_load: the expert-distribution recorder is an SGLang feature")
        if w.max_warmup_steps + p.num_steps > w.output_len:
            problems.append(
                f"workload.output_len ({w.output_len}) is shorter than workload.max_warmup_steps "
                f"({w.max_warmup_steps}) + profile.num_steps ({p.num_steps}): requests would finish "
                "before the profile does"
            )
        cfg = embedded_model_config(s)
        layers, dense = cfg["num_hidden_layers"], cfg["first_k_dense_replace"]
        if dense < 1 or dense >= layers:
            problems.append(
                f"model.first_k_dense_replace ({dense}) must be at least 1 and below model.num_layers ({layers}): "
                "the demo needs both a dense layer and MoE layers"
            )
        experts, group, topk_group, per_tok = (
            cfg["n_routed_experts"], cfg["n_group"], cfg["topk_group"], cfg["num_experts_per_tok"]
        )
        if experts % group:
            problems.append(f"model.n_routed_experts ({experts}) is not divisible by model.n_group ({group})")
        elif topk_group > group:
            problems.append(f"model.topk_group ({topk_group}) exceeds model.n_group ({group})")
        elif per_tok > topk_group * (experts // group):
            problems.append(
                f"model.num_experts_per_tok ({per_tok}) exceeds the experts in the chosen groups "
                f"(topk_group {topk_group} x {experts // group} experts per group)"
            )
        elif experts // group < 2:
            problems.append("model: each expert group needs at least 2 experts (grouped top-k sums the top 2)")
        if w.input_len + w.output_len > cfg["max_position_embeddings"]:
            problems.append(
                f"workload.input_len + workload.output_len ({w.input_len + w.output_len}) exceeds the preset's "
                f"max_position_embeddings ({cfg['max_position_embeddings']})"
            )
    elif s.engine.disaggregation is not None:
        problems += disaggregation_problems(s)
    else:
        e = s.engine
        total_gpus = s.cluster.nodes * s.cluster.gpus_per_node
        if total_gpus < 1:
            problems.append("engine.kind sglang needs GPUs: cluster.gpus_per_node is 0")
        elif e.tp * e.pp > total_gpus:
            what = f"engine.tp ({e.tp})" + (f" x engine.pp ({e.pp})" if e.pp > 1 else "")
            problems.append(f"{what} exceeds the cluster's GPUs (nodes x gpus_per_node = {total_gpus})")
        # A PD pair's prefill server never holds the decode batch: the batch checks are the decode role's.
        from harness.argv_tokens import extra_arg_value
        prefill_role = extra_arg_value(e.extra_args, "--disaggregation-mode") == "prefill"
        if not prefill_role and e.max_running_requests is not None and w.batch_size > e.max_running_requests:
            problems.append(
                f"workload.batch_size ({w.batch_size}) exceeds engine.max_running_requests ({e.max_running_requests}): "
                "the server never runs that batch, so steady state is never reached"
            )
        if not prefill_role and e.dp_attention and e.dp > 1 and e.max_running_requests is not None:
            share = -(-w.batch_size // e.dp)
            needed = e.dp * (share + 1)
            if e.max_running_requests < needed:
                problems.append(
                    f"engine.max_running_requests ({e.max_running_requests}) with DP attention over {e.dp} groups: "
                    f"each group may hold {e.max_running_requests // e.dp} requests and SGLang (seen with 0.5.17) "
                    f"keeps one of them waiting, so the {share} requests of workload.batch_size ({w.batch_size}) "
                    f"per group never all run: use at least {needed}")
        if e.tp % e.dp:
            problems.append(f"engine.tp ({e.tp}) is not divisible by engine.dp ({e.dp})")
        if e.ep not in (1, e.tp):
            problems.append(f"engine.ep ({e.ep}) must be 1 or equal to engine.tp ({e.tp})")
        if len(p.stages) != 1:
            problems.append(f"profile.stages: one stage a run, DECODE or EXTEND (not {p.stages})")
        if "EXTEND" in p.stages and p.sglang_profiler == "v2":
            problems.append("profile.stages: EXTEND is profiled with the classic profiler's plain window "
                            "(profile V2 stops at the first decode step between two prefills): use "
                            "profile.sglang_profiler auto or v1")
        if "EXTEND" in p.stages and p.expert_load:
            problems.append("profile.expert_load: the expert distribution is recorded over a decode window only "
                            "(profile.stages [DECODE])")
        per_step = e.speculative.num_draft_tokens if e.speculative else 1
        if "EXTEND" not in p.stages and w.output_len <= (p.num_steps + 2) * per_step:
            problems.append(
                f"workload.output_len ({w.output_len}) must exceed (profile.num_steps + 2) x tokens per decode step "
                f"({(p.num_steps + 2) * per_step}): new requests pause while the profile runs, and the running "
                "ones must last until the profiler stops"
            )
    return problems


def disaggregation_problems(s: Scenario) -> list[str]:
    """A PD scenario: the roles' nodes make the cluster, the ports differ, and each role's own scenario
    (harness/pd_roles.py) is one that could run alone; its problems are named with the role."""
    from harness.pd_roles import ROLES, role_data

    pd, problems = s.engine.disaggregation, []
    if pd.prefill.nodes + pd.decode.nodes != s.cluster.nodes:
        problems.append(f"engine.disaggregation: prefill.nodes ({pd.prefill.nodes}) + decode.nodes ({pd.decode.nodes}) "
                        f"must equal cluster.nodes ({s.cluster.nodes}): each node serves one role")
    if not s.profile.stages:
        problems.append("profile.stages: name the roles' windows to profile: EXTEND (prefill), DECODE (decode)")
    ports = {}
    for role in ROLES:
        data = role_data(s, role)
        engine = data["engine"]
        for key in ("port", "dist_init_port"):
            ports.setdefault(engine[key], f"{role} {key}")
        try:
            Scenario.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                loc, msg = _describe(err)
                where = ".".join(str(x) for x in loc)
                for part in ([msg] if where else msg.split("; ")):  # combination problems come joined
                    problems.append(f"engine.disaggregation.{role}: {where + ': ' if where else ''}{part}")
    clash = ports.get(pd.router.port) or (f"prefill bootstrap_port" if pd.router.port == pd.bootstrap_port else None)
    if clash:
        problems.append(f"engine.disaggregation.router.port ({pd.router.port}) is the {clash} too")
    if len(ports) < 4:
        problems.append("engine.disaggregation: the prefill and decode roles' port and dist_init_port must all differ "
                        "(both roles may share a host)")
    return problems


def resolve_scenario_path(name_or_path: str) -> Path:
    """`demo` means scenarios/demo.yaml (the working directory's, then the shipped one); a path is a path."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or os.sep in name_or_path or candidate.exists():
        if not candidate.exists():
            raise ScenarioError(name_or_path, ["no such file"])
        return candidate
    for folder in (Path.cwd() / "scenarios", SCENARIOS_DIR):
        for ext in (".yaml", ".yml"):
            path = folder / f"{name_or_path}{ext}"
            if path.exists():
                return path
    known = sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml")) if SCENARIOS_DIR.exists() else []
    raise ScenarioError(name_or_path, [f"no scenario named {name_or_path!r} in {SCENARIOS_DIR} (known: {', '.join(known)})"])


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at `loc` (or its nearest existing parent)."""
    node, line = root, None
    for key in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(key):
                    line = k.start_mark.line + 1
                    nxt = v
            node = nxt
            if nxt is None:
                break
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
    else:
        if node is not None:
            line = node.start_mark.line + 1
    return line


def _describe(err: dict[str, Any]) -> tuple[tuple[Any, ...], str]:
    loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x in ("embedded", "sglang")))
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "union_tag_invalid":
        loc = loc + ("kind",)
        msg = f"unknown engine kind {err.get('ctx', {}).get('tag')!r} (expected embedded or sglang)"
    elif err["type"] == "union_tag_not_found":
        msg = "missing key 'kind' (embedded or sglang)"
    elif err["type"] == "missing":
        msg = "missing (required)"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return loc, msg


_KEY_IN_MESSAGE = re.compile(r"^([a-z_]+(?:\.[a-z_]+)+)")


def parse_scenario(text: str, source: str) -> Scenario:
    from analysis.api import load_yaml

    try:
        data = load_yaml(text)  # a key given twice refused; every failure a YAMLError
        root = _composed(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(source, [f"not valid YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise ScenarioError(source, ["the top level must be a mapping of sections (name, engine, workload, ...)"])
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc, msg = _describe(err)
            if not loc:  # a combination problem: each message starts with the key it is about
                for part in msg.split("; "):
                    named = _KEY_IN_MESSAGE.match(part)
                    line = _line_of(root, tuple(named.group(1).split("."))) if named else None
                    problems.append(f"{part} (line {line})" if line else part)
                continue
            key = ".".join(str(x) for x in loc)
            line = _line_of(root, loc) if err["type"] != "missing" else None  # a missing key has no line
            where = f"{key} (line {line})" if line else key
            problems.append(f"{where}: {msg}")
        raise ScenarioError(source, problems) from None


def _composed(text: str) -> yaml.Node | None:
    """The YAML node tree (for line numbers), nesting too deep for the parser a YAMLError."""
    try:
        return yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except RecursionError:
        raise yaml.YAMLError("nested too deeply to read") from None


def read_scenario_text(path: Path) -> str:
    """The scenario file's text: bounded (CONFIG_LIMIT_BYTES), UTF-8, never a device or a FIFO's wait."""
    from analysis.api import CONFIG_LIMIT_BYTES, InputFileError, read_input_text

    try:
        return read_input_text(path, CONFIG_LIMIT_BYTES, "a scenario")
    except InputFileError as exc:
        raise ScenarioError(exc.path, [exc.problem]) from None


def load_scenario(name_or_path: str) -> tuple[Scenario, Path]:
    path = resolve_scenario_path(name_or_path)
    return parse_scenario(read_scenario_text(path), str(path)), path


def scenario_to_yaml(scenario: Scenario, secrets=None) -> str:
    """The resolved scenario (every default filled in), as written into the run directory.

    Secrets are masked (harness/node/secrets.py): engine.env values of secret-looking or passthrough
    names, secret flags' values in engine.extra_args, URL credentials, and every value of `secrets`
    (the run's, harness/run_secrets.py) wherever it stands whole, and, at any depth (a PD role's env and
    extra_args too), the value of a secret-looking key and the item after a secret flag (Secrets.yaml).
    """
    from harness.node.secrets import Secrets

    secrets = secrets or Secrets()
    data = scenario.model_dump(mode="json")
    engine = data["engine"]
    if isinstance(engine.get("env"), dict):
        engine["env"] = secrets.env(engine["env"], engine.get("passthrough_env") or ())
    for key in ("extra_args", "launcher"):
        if isinstance(engine.get(key), list):
            engine[key] = secrets.argv(engine[key])
    return secrets.yaml(yaml.safe_dump(secrets.data(data), sort_keys=False))
