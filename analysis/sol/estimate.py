"""Speed of light (SOL) of a DeepSeek-V3-style decode step: FLOPs and bytes per module, per rank.

Why: a D4 cell says how long a module took; it does not say whether that is good. The lower
bound a module cannot beat on given hardware is max(FLOPs / compute peak, HBM bytes / HBM
bandwidth), or network bytes / link bandwidth for all-to-all. The ratio SOL / measured says how
far each module is from the hardware limit. Formulas are written out in docs/sol.md.

Conventions: everything is per rank and per layer; tokens T = batch_per_rank x (1 + MTP draft
tokens) for the target (verify) pass; weights are read once per step (no cross-step cache reuse);
elementwise FLOPs are not counted (such kernels are memory bound by construction).

Two forms of MLA (Deployment.mla_form): "absorbed" is SGLang's decode (W_UK / W_UV folded into
the query and output, latent cache read once for all heads, residual add fused into the norms);
"expanded" is how transformers runs it (kv_b_proj expands the new tokens' latent into per-head K
and V, attention over a per-head K/V cache, plain RMSNorm and separate residual adds).
"""
from __future__ import annotations

import math
from typing import Any

import msgspec

from analysis.errors import AnalysisError
from analysis.sol.hardware import Hardware, load_hardware
from analysis.sol.model_shapes import ModelShapes, load_model_shapes

DTYPE_BYTES = {"fp8": 1, "bf16": 2, "fp32": 4}
SCALE_BYTES = 4  # one FP32 scale per block (weights 128x128, activations 1x128)

BOUND_COMPUTE = "compute"
BOUND_MEMORY = "memory"
BOUND_NETWORK = "network"
BOUND_NONE = "none"  # no work on this rank (e.g. dispatch / combine with ep 1: nothing leaves the GPU)

MLA_ABSORBED = "absorbed"
MLA_EXPANDED = "expanded"
MLA_FORMS = (MLA_ABSORBED, MLA_EXPANDED)


class SolInputError(AnalysisError):
    """A deployment parameter is out of range: names the parameter."""


class Deployment(msgspec.Struct, frozen=True):
    """What a rank runs: enough to count its FLOPs and bytes."""

    batch_per_rank: int  # requests in this rank's attention batch (after the DP split)
    kv_len: int  # mean KV-cache length of those requests, in tokens
    tp: int = 1  # attention tensor parallelism (heads split over tp ranks)
    dp: int = 1  # attention data-parallel groups; world = tp x dp
    ep: int = 1  # expert-parallel ranks the routed experts are spread over
    mtp_draft_tokens: int = 0  # draft tokens verified per request per step
    weight_dtype: str = "fp8"  # linear and expert weights (block-scaled FP8, or BF16)
    kv_dtype: str = "bf16"  # MLA latent KV cache
    absorb_dtype: str = "bf16"  # absorbed W_UK / W_UV bmm weights
    dispatch_dtype: str = "fp8"  # DeepEP dispatch payload (combine is always BF16)
    touched_experts_per_rank: float | None = None  # measured value; default: uniform routing
    intranode_over_nvlink: bool = True  # False: low-latency all-to-all over RDMA only
    mla_form: str = MLA_ABSORBED  # absorbed (SGLang decode) | expanded (transformers: per-head K/V cache)

    def validate(self) -> None:
        for name in ("batch_per_rank", "kv_len", "tp", "dp", "ep"):
            if getattr(self, name) < (0 if name == "kv_len" else 1):
                raise SolInputError(f"deployment.{name} must be positive, got {getattr(self, name)}")
        if self.mtp_draft_tokens < 0:
            raise SolInputError(f"deployment.mtp_draft_tokens must be >= 0, got {self.mtp_draft_tokens}")
        for name in ("weight_dtype", "kv_dtype", "absorb_dtype", "dispatch_dtype"):
            if getattr(self, name) not in ("fp8", "bf16"):
                raise SolInputError(f"deployment.{name} must be fp8 or bf16, got {getattr(self, name)!r}")
        if self.mla_form not in MLA_FORMS:
            raise SolInputError(f"deployment.mla_form must be {' or '.join(MLA_FORMS)}, got {self.mla_form!r}")

    @property
    def tokens(self) -> int:
        return self.batch_per_rank * (1 + self.mtp_draft_tokens)

    @property
    def world(self) -> int:
        return self.tp * self.dp


class SolSettings(msgspec.Struct, frozen=True):
    """What the D4 table's SOL columns need: hardware peaks, the deployment, the model's shapes.

    Saved with the D4 column (analysis.json), so a table can say what its SOL assumed.
    """

    hardware: str  # built-in name (h800, h100, h200, b200) or a YAML path
    deployment: Deployment
    model: str = "deepseek-v3"  # analysis/data/models/<model>.yaml with a `shapes:` mapping

    def describe(self) -> str:
        d = self.deployment
        form = f", MLA {d.mla_form}" if d.mla_form != MLA_ABSORBED else ""
        return (f"{self.model} on {self.hardware}: batch {d.batch_per_rank} per rank, KV length {d.kv_len}, "
                f"tp {d.tp}, dp {d.dp}, ep {d.ep}, MTP draft tokens {d.mtp_draft_tokens}, "
                f"weights {d.weight_dtype}, KV {d.kv_dtype}{form}")


class Cost(msgspec.Struct, frozen=True):
    """Work of one module on one rank for one layer."""

    term: str
    flops: float
    hbm_bytes: float
    compute_dtype: str = "bf16"
    nvlink_bytes: float = 0.0
    rdma_bytes: float = 0.0


class SolTime(msgspec.Struct, frozen=True):
    term: str
    sol_us: float
    bound: str  # compute | memory | network | none (no work)
    compute_us: float
    memory_us: float
    network_us: float
    flops: float
    hbm_bytes: float
    net_bytes: float


def sol_time(cost: Cost, hw: Hardware) -> SolTime:
    compute_us = cost.flops / hw.flops_per_s(cost.compute_dtype) * 1e6 if cost.flops else 0.0
    memory_us = cost.hbm_bytes / hw.peak("hbm_bytes_per_s") * 1e6
    network_us = max(cost.nvlink_bytes / hw.peak("nvlink_bytes_per_s"), cost.rdma_bytes / hw.peak("rdma_bytes_per_s")) * 1e6
    bound, sol_us = max(
        ((BOUND_COMPUTE, compute_us), (BOUND_MEMORY, memory_us), (BOUND_NETWORK, network_us)), key=lambda item: item[1]
    )
    if sol_us == 0.0:
        bound = BOUND_NONE
    return SolTime(
        term=cost.term, sol_us=sol_us, bound=bound, compute_us=compute_us, memory_us=memory_us,
        network_us=network_us, flops=cost.flops, hbm_bytes=cost.hbm_bytes,
        net_bytes=cost.nvlink_bytes + cost.rdma_bytes,
    )


# ---- building blocks ---------------------------------------------------------------------------

def gemm_cost(term: str, tokens: float, n: int, k: int, dtype: str, block: int, out_bytes: int = 2,
              weight_copies: float = 1.0) -> Cost:
    """Y[tokens, n] = X[tokens, k] @ W[k, n]; FP8 means block-scaled weights and 1x`block` activation scales.

    weight_copies: how many distinct weight matrices are read (touched experts for grouped GEMMs).
    """
    elem = DTYPE_BYTES[dtype]
    weight = n * k * elem
    act_in = tokens * k * elem
    if dtype == "fp8":
        weight += math.ceil(n / block) * math.ceil(k / block) * SCALE_BYTES
        act_in += tokens * math.ceil(k / block) * SCALE_BYTES
    return Cost(
        term=term, flops=2.0 * tokens * n * k, hbm_bytes=weight_copies * weight + act_in + tokens * n * out_bytes,
        compute_dtype=dtype,
    )


def expected_touched_experts(local_experts: int, total_experts: int, top_k: int, global_tokens: int) -> float:
    """Expected distinct local experts hit when every token picks top_k of total_experts uniformly."""
    miss = (1.0 - top_k / total_experts) ** global_tokens
    return local_experts * (1.0 - miss)


def touched_experts(m: ModelShapes, d: Deployment) -> tuple[float, float]:
    """(experts whose weights a rank reads per MoE layer, experts on the rank): the measured value where
    given, else what uniform routing touches."""
    local = m.n_routed_experts / d.ep
    if d.touched_experts_per_rank is not None:
        return d.touched_experts_per_rank, local
    return expected_touched_experts(local, m.n_routed_experts, m.num_experts_per_tok, d.tokens * d.dp), local


def _elementwise(term: str, hbm_bytes: float) -> Cost:
    return Cost(term=term, flops=0.0, hbm_bytes=hbm_bytes)


# ---- the layer ---------------------------------------------------------------------------------

def _norm_bytes(d: Deployment, tokens: float, width: int) -> float:
    """An RMSNorm over `width`: fused add+RMSNorm (absorbed form: x and residual in, both out) or plain
    RMSNorm (expanded form, transformers: x in, y out; the residual add is its own term)."""
    bf16 = DTYPE_BYTES["bf16"]
    passes = 4 if d.mla_form == MLA_ABSORBED else 2
    return passes * tokens * width * bf16 + width * bf16


def attention_costs(m: ModelShapes, d: Deployment) -> list[Cost]:
    """The attention block in the deployment's MLA form (plus, in the expanded form, the layer's residual adds)."""
    if d.mla_form == MLA_EXPANDED:
        return _expanded_attention_costs(m, d)
    return _absorbed_attention_costs(m, d)


def _absorbed_attention_costs(m: ModelShapes, d: Deployment) -> list[Cost]:
    """MLA with absorbed weights (decode form): latent KV read once per request for all heads."""
    t, b, blk = d.tokens, d.batch_per_rank, m.weight_block_size
    heads = m.num_attention_heads / d.tp
    h, rope, nope, lat, v = m.hidden_size, m.qk_rope_head_dim, m.qk_nope_head_dim, m.kv_lora_rank, m.v_head_dim
    bf16 = DTYPE_BYTES["bf16"]
    absorb = DTYPE_BYTES[d.absorb_dtype]
    kv_elem = DTYPE_BYTES[d.kv_dtype]
    qk_dim = lat + rope  # 576: query/key dim after absorption
    return [
        _elementwise("input_layernorm", _norm_bytes(d, t, h)),  # fused add+RMSNorm: x, residual in; both out
        gemm_cost("q_a_kv_a_proj", t, m.q_lora_rank + lat + rope, h, d.weight_dtype, blk),  # replicated over tp
        _elementwise("q_kv_a_layernorm", 2 * t * (m.q_lora_rank + lat) * bf16 + (m.q_lora_rank + lat) * bf16),
        gemm_cost("q_b_proj", t, int(heads * (nope + rope)), m.q_lora_rank, d.weight_dtype, blk),
        Cost("w_uk_bmm", flops=2.0 * t * heads * nope * lat,
             hbm_bytes=heads * nope * lat * absorb + t * heads * nope * bf16 + t * heads * lat * bf16),
        _elementwise("rotary_emb", 2 * (t * heads * rope + t * rope) * bf16),
        Cost("mla_attention", flops=2.0 * t * heads * d.kv_len * (qk_dim + lat),
             hbm_bytes=b * d.kv_len * qk_dim * kv_elem + t * heads * qk_dim * bf16 + t * heads * lat * bf16,
             compute_dtype=d.kv_dtype),
        Cost("w_uv_bmm", flops=2.0 * t * heads * lat * v,
             hbm_bytes=heads * lat * v * absorb + t * heads * lat * bf16 + t * heads * v * bf16),
        gemm_cost("o_proj", t, h, int(heads * v), d.weight_dtype, blk),
    ]


def _expanded_attention_costs(m: ModelShapes, d: Deployment) -> list[Cost]:
    """MLA as transformers runs it: kv_b_proj expands the T new tokens' latent into per-head K (nope)
    and V; attention reads every cached token's per-head K (nope + rope) and V. Only the T new
    tokens' K/V are written: the copies a growing cache makes (torch.cat in DynamicCache) are
    implementation overhead, not work the layer needs.
    """
    t, b, blk = d.tokens, d.batch_per_rank, m.weight_block_size
    heads = m.num_attention_heads / d.tp
    h, rope, nope, lat, v = m.hidden_size, m.qk_rope_head_dim, m.qk_nope_head_dim, m.kv_lora_rank, m.v_head_dim
    bf16 = DTYPE_BYTES["bf16"]
    kv_elem = DTYPE_BYTES[d.kv_dtype]
    qk = nope + rope  # 192: per-head query/key dim
    return [
        _elementwise("input_layernorm", _norm_bytes(d, t, h)),
        gemm_cost("q_a_kv_a_proj", t, m.q_lora_rank + lat + rope, h, d.weight_dtype, blk),  # q_a_proj + kv_a_proj_with_mqa
        _elementwise("q_kv_a_layernorm", 2 * t * (m.q_lora_rank + lat) * bf16 + (m.q_lora_rank + lat) * bf16),
        gemm_cost("q_b_proj", t, int(heads * qk), m.q_lora_rank, d.weight_dtype, blk),
        gemm_cost("kv_b_proj", t, int(heads * (nope + v)), lat, d.weight_dtype, blk),  # new tokens only
        _elementwise("rotary_emb", 2 * (t * heads * rope + t * rope) * bf16),
        Cost("mla_attention", flops=2.0 * t * heads * d.kv_len * qk + 2.0 * t * heads * d.kv_len * v,
             hbm_bytes=b * d.kv_len * heads * (qk + v) * kv_elem  # K and V of every cached token, per head
             + t * heads * (qk + v) * bf16  # the new tokens' K and V written to the cache
             + t * heads * qk * bf16 + t * heads * v * bf16,  # q in, out
             compute_dtype=d.kv_dtype),
        gemm_cost("o_proj", t, h, int(heads * v), d.weight_dtype, blk),
        # Both residual adds of the layer (after attention, after the MLP): each reads 2 T h, writes T h.
        _elementwise("residual_add", 2 * 3 * t * h * bf16),
    ]


def moe_costs(m: ModelShapes, d: Deployment, gpus_per_node: int = 8) -> list[Cost]:
    """Router, DeepEP dispatch/combine, grouped routed experts, shared expert."""
    t, blk, h, inter = d.tokens, m.weight_block_size, m.hidden_size, m.moe_intermediate_size
    bf16 = DTYPE_BYTES["bf16"]
    act_elem = DTYPE_BYTES[d.weight_dtype]
    global_tokens = t * d.dp
    pairs_here = global_tokens * m.num_experts_per_tok / d.ep  # token-expert pairs this rank's experts compute
    touched, _local = touched_experts(m, d)
    quant_out = pairs_here * inter * act_elem + (pairs_here * math.ceil(inter / blk) * SCALE_BYTES if d.weight_dtype == "fp8" else 0)
    shared_inter = inter * m.n_shared_experts // d.tp
    shared_quant_out = t * shared_inter * act_elem + (t * math.ceil(shared_inter / blk) * SCALE_BYTES if d.weight_dtype == "fp8" else 0)
    return [
        _elementwise("post_attention_layernorm", _norm_bytes(d, t, h)),
        gemm_cost("router_gemm", t, m.n_routed_experts, h, "bf16", blk, out_bytes=DTYPE_BYTES["fp32"]),
        _dispatch_combine("dispatch", m, d, _dispatch_message_bytes(m, d), gpus_per_node),
        gemm_cost("experts_up_gate", pairs_here, 2 * inter, h, d.weight_dtype, blk, weight_copies=touched),
        _elementwise("experts_silu", pairs_here * 2 * inter * bf16 + quant_out),
        gemm_cost("experts_down", pairs_here, h, inter, d.weight_dtype, blk, weight_copies=touched),
        _dispatch_combine("combine", m, d, h * bf16, gpus_per_node),
        gemm_cost("shared_up_gate", t, 2 * shared_inter, h, d.weight_dtype, blk),
        _elementwise("shared_silu", t * 2 * shared_inter * bf16 + shared_quant_out),
        gemm_cost("shared_down", t, h, shared_inter, d.weight_dtype, blk),
    ]


def dense_mlp_costs(m: ModelShapes, d: Deployment) -> list[Cost]:
    """The first_k_dense_replace layers: one wide SwiGLU MLP, split over tp."""
    t, blk, h = d.tokens, m.weight_block_size, m.hidden_size
    inter = m.intermediate_size // d.tp
    bf16, act_elem = DTYPE_BYTES["bf16"], DTYPE_BYTES[d.weight_dtype]
    quant_out = t * inter * act_elem + (t * math.ceil(inter / blk) * SCALE_BYTES if d.weight_dtype == "fp8" else 0)
    return [
        _elementwise("post_attention_layernorm", _norm_bytes(d, t, h)),
        gemm_cost("dense_up_gate", t, 2 * inter, h, d.weight_dtype, blk),
        _elementwise("dense_silu", t * 2 * inter * bf16 + quant_out),
        gemm_cost("dense_down", t, h, inter, d.weight_dtype, blk),
    ]


def head_costs(m: ModelShapes, d: Deployment) -> list[Cost]:
    """After the last layer: final norm and the BF16 LM head (vocab split over tp)."""
    t, h, bf16 = d.tokens, m.hidden_size, DTYPE_BYTES["bf16"]
    return [
        _elementwise("final_norm", 2 * t * h * bf16 + h * bf16),
        gemm_cost("lm_head", t, m.vocab_size // d.tp, h, "bf16", m.weight_block_size),
    ]


def _dispatch_message_bytes(m: ModelShapes, d: Deployment) -> float:
    h = m.hidden_size
    if d.dispatch_dtype == "fp8":
        return h + math.ceil(h / m.weight_block_size) * SCALE_BYTES
    return h * DTYPE_BYTES["bf16"]


def _dispatch_combine(term: str, m: ModelShapes, d: Deployment, message_bytes: float, gpus_per_node: int) -> Cost:
    """Each token this rank routes goes to top_k experts; destinations uniform over ep ranks.

    A message to this rank itself costs no link; to a peer in the node it uses NVLink (or RDMA
    when intranode_over_nvlink is off); to another node, RDMA. Links are full duplex, so the
    bytes a rank sends bound its time (it receives as many, on the other direction).
    """
    tokens_routed = d.tokens * d.dp / d.world  # attention-TP groups split their tokens before dispatch
    messages = tokens_routed * m.num_experts_per_tok
    per_node = min(gpus_per_node, d.ep)
    intra_peers = per_node - 1
    remote = d.ep - per_node
    intra_bytes = messages * intra_peers / d.ep * message_bytes
    remote_bytes = messages * remote / d.ep * message_bytes
    if d.intranode_over_nvlink:
        return Cost(term=term, flops=0.0, hbm_bytes=0.0, nvlink_bytes=intra_bytes, rdma_bytes=remote_bytes)
    return Cost(term=term, flops=0.0, hbm_bytes=0.0, rdma_bytes=intra_bytes + remote_bytes)


class StepSol(msgspec.Struct, frozen=True):
    attention: list[SolTime]
    moe: list[SolTime]
    dense_mlp: list[SolTime]
    head: list[SolTime]
    step_us: float  # sum of every term's SOL over all layers (no overlap credited)


def layer_sol(model: ModelShapes | str, deployment: Deployment, hardware: Hardware | str) -> StepSol:
    """Per-term SOL for one attention block, one MoE block, one dense MLP block and the head."""
    m = load_model_shapes(model) if isinstance(model, str) else model
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    deployment.validate()
    att = [sol_time(c, hw) for c in attention_costs(m, deployment)]
    moe = [sol_time(c, hw) for c in moe_costs(m, deployment, hw.gpus_per_node)]
    dense = [sol_time(c, hw) for c in dense_mlp_costs(m, deployment)]
    head = [sol_time(c, hw) for c in head_costs(m, deployment)]
    step = (
        m.num_layers * sum(s.sol_us for s in att)
        + m.moe_layers * sum(s.sol_us for s in moe)
        + m.first_k_dense_replace * sum(s.sol_us for s in dense)
        + sum(s.sol_us for s in head)
    )
    return StepSol(attention=att, moe=moe, dense_mlp=dense, head=head, step_us=step)


def sol_by_term(step: StepSol) -> dict[str, SolTime]:
    return {s.term: s for s in (*step.attention, *step.moe, *step.dense_mlp, *step.head)}


def _row_field(row: Any, name: str, index: int) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    if isinstance(row, (tuple, list)):
        return row[index] if index < len(row) else None
    return getattr(row, name, None)


class D4Sol(msgspec.Struct, frozen=True):
    """SOL columns for one D4 row; sol_us None where the row has no SOL term.

    A row mapped to several terms (a composite map entry, e.g. a whole transformers module) has
    term "a+b+c", the sum of their SOL us, FLOPs and bytes, and the bound of the largest of them.
    """

    group: str
    module: str
    kernel: str
    value_us: float | None
    term: str | None
    sol_us: float | None
    sol_pct: float | None  # 100 x SOL / measured: 100 = at the hardware limit; None where SOL is 0 (bound none)
    bound: str | None
    flops: float | None = None  # per layer, summed over the row's terms
    hbm_bytes: float | None = None  # per layer, summed over the row's terms


def sol_for_d4_rows(rows: list[Any], deployment: Deployment, hardware: Hardware | str,
                    model: ModelShapes | str = "deepseek-v3", module_map: str | None = None) -> list[D4Sol]:
    """SOL us, percent of SOL and bound for each D4 row (objects, dicts or (group, module, value_us[, kernel])).

    Rows are matched to SOL terms by analysis/sol/sol_module_map.yaml (sol_module_map.assign_terms);
    each term goes to the first matching row only, so a module split over several kernel rows is not
    counted twice. Terms the deployment's model and MLA form do not have (kv_b_proj in the absorbed
    form) are never matched.
    """
    from analysis.sol.sol_module_map import assign_terms, load_module_map

    terms = sol_by_term(layer_sol(model, deployment, hardware))
    fields = [(str(_row_field(row, "group", 0) or ""), str(_row_field(row, "module", 1) or ""),
               _row_field(row, "value_us", 2), str(_row_field(row, "kernel", 3) or "")) for row in rows]
    assigned = assign_terms(load_module_map(module_map), [(g, m, k) for g, m, _v, k in fields], terms.keys())
    out: list[D4Sol] = []
    for (group, module, value, kernel), matched in zip(fields, assigned):
        if not matched:
            out.append(D4Sol(group, module, kernel, value, None, None, None, None))
            continue
        parts = [terms[t] for t in matched]
        sol_us = sum(p.sol_us for p in parts)
        largest = max(parts, key=lambda p: p.sol_us)
        bound = largest.bound if sol_us > 0 else BOUND_NONE
        # no work on this rank (bound none): no percentage, which would read as a kernel at 0% of its limit
        pct = 100.0 * sol_us / value if value and sol_us > 0 else None
        out.append(D4Sol(group, module, kernel, value, "+".join(matched), sol_us, pct, bound,
                         flops=sum(p.flops for p in parts), hbm_bytes=sum(p.hbm_bytes for p in parts)))
    return out
