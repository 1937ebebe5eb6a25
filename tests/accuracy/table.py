"""The accuracy truth's table: how a trace's own ranges name a D4 row (tests/accuracy/truth.py).

Kept in the tests, written apart from the analysis (it shares no file, pattern or code with
analysis/attribution), so the suite's truth cannot move when the analysis moves. Everything here
is a fact of how the models are written (their module classes and attribute names, the python
functions the profiler records) or of the D4 table's vocabulary (its group / module names).
"""
from __future__ import annotations

import re

# ---------------------------------------------------------------- module classes (nn.Module: Class_N)

# A model's forward: one step. NextN: SGLang's MTP draft model (its own forward, its own step).
MODEL_CLASS = re.compile(r"(ForCausalLM|Model|NextN|^ExpertParallelDeepseekV3)$")
LAYER_CLASS = re.compile(r"DecoderLayer$|^TransformerBlock$")  # TransformerBlock: vLLM's gpt-oss
ATTENTION_CLASS = re.compile(r"Attention$|AttentionMLA$")
ATTENTION_CORE_CLASS = re.compile(r"^RadixAttention$|^Attention$")  # SGLang's / vLLM's attention computation
NORM_CLASS = re.compile(r"RMSNorm$|LayerNorm$")
LINEAR_CLASS = re.compile(r"Linear$")
ROTARY_CLASS = re.compile(r"RotaryEmbedding$")
ACT_CLASS = re.compile(r"SiLUActivation$|SiluAndMul$|GELUActivation$")
MOE_BLOCK_CLASS = re.compile(r"MoE$|SparseMoeBlock$|GptOssMLP$|^MLPBlock$")
ROUTER_CLASS = re.compile(r"TopkRouter$|TopKRouter$|^MoEGate$")
TOPK_CLASS = re.compile(r"^TopK$")  # SGLang's top-k selection module
# SGLang's expert-parallel experts modules (DeepEPMoE, EPMoE subclass FusedMoE): the experts, not a MoE block
EXPERTS_CLASS = re.compile(r"Experts$|^FusedMoE$|^LocalExperts$|^DeepEPMoE$|^EPMoE$")
DISPATCH_CLASS = re.compile(r"Dispatch$")
COMBINE_CLASS = re.compile(r"Combine$")
MLP_CLASS = re.compile(r"MLP$")  # a dense MLP, or a shared expert inside a MoE block

# ---------------------------------------------------------------- python functions (with_stack)

ROTARY_FUNCTION = re.compile(r"apply_rotary|_apply_rotary_emb|apply_rope")
# The attention computation itself: where the projections before it end and o_proj begins.
ATTN_COMPUTE_FUNCTION = re.compile(r"sdpa_attention_forward|eager_attention_forward")
# The attention computation with the KV-cache update and the latent expansion around it.
ATTN_CORE_FUNCTION = re.compile(r"sdpa_attention_forward|eager_attention_forward|cache_utils\.py\(\d+\): update"
                                r"|: expand_kv$|: repeat_kv$|record_ep_decode\.py\(\d+\): update")
TOPK_FUNCTION = re.compile(r"method topk of|: select_experts$")
DISPATCH_FUNCTION = re.compile(r"token_dispatcher/\w+\.py\(\d+\): dispatch$")
ALL_REDUCE_FUNCTION = re.compile(r": tensor_model_parallel_all_reduce$")  # tensor parallelism's all-reduce
COMBINE_FUNCTION = re.compile(r"token_dispatcher/\w+\.py\(\d+\): combine$")
# One call of the experts' grouped projection (transformers' grouped_mm path): within one experts
# call, the first is the up/gate projection, the second the down projection.
EXPERT_LINEAR_FUNCTION = re.compile(r": _grouped_linear$|: invoke_fused_moe_kernel$")

# ---------------------------------------------------------------- kernel names (where no range tells)

# Inside the routed experts without a projection function (the per-expert loop, DeepGEMM) no range
# tells the up/gate GEMM from the down GEMM: the GEMMs are found by name, and named by their place
# around the activation (before it: up_gate, after: down). A router module that also selects the
# experts (transformers' TopkRouter) is split the same way: its GEMM is the router, the rest topk.
# SGLang's two-batch overlap (sglang/srt/batch_overlap/): a MoE layer runs as these operation functions of
# the layer and its modules, one call per micro-batch and layer, the decoder layer's forward never called.
TBO_OPERATION = re.compile(r"\): (?P<op>op_(comm_prepare_attn|prepare|core|comm_prepare_mlp|gate|select_experts|"
                           r"dispatch_a|dispatch_b|experts|combine_a|combine_b|shared_experts|output|"
                           r"comm_postprocess_layer))$")
TBO_OPERATION_ROWS = {  # the row of a kernel an operation launches, where no module below it says more
    "op_comm_prepare_attn": "input_layernorm", "op_prepare": "self_attn", "op_core": "attn_core",
    "op_comm_prepare_mlp": "post_attention_layernorm", "op_gate": "router", "op_select_experts": "topk",
    "op_dispatch_a": "dispatch", "op_dispatch_b": "dispatch", "op_experts": "experts",
    "op_combine_a": "combine", "op_combine_b": "combine", "op_shared_experts": "shared_experts",
    "op_output": "combine", "op_comm_postprocess_layer": "residual_add",
}

GEMM_KERNEL = re.compile(r"gemm|GEMM|nvjet|cutlass|cublas|Cijk|fused_moe_kernel|^bmm_|aten::(_grouped_mm|mm|bmm|addmm|baddbmm|linear|matmul)$",
                         re.IGNORECASE)
# Inside an experts module that also routes (vLLM's FusedMoE): its routing kernels are topk, its
# finalize (the top-k weighted sum of the expert outputs) is combine.
EXPERTS_TOPK_KERNEL = re.compile(r"routing|topk", re.IGNORECASE)
EXPERTS_COMBINE_KERNEL = re.compile(r"finalizeKernel|moe_sum_reduce")
# A collective's kernel (NCCL's device kernels, SGLang's / vLLM's custom all-reduce): its own row in the
# communication group, by the operation its name says, wherever in the layer it is launched (a
# row-parallel linear's reduction, the layer communicator's reduce-scatter / all-gather, an
# expert-parallel MoE's sum over ranks): a recording that kept no communication function range
# still tells a collective from the module around it.
# (An all-to-all's send / receive kernels are the dispatch's or the combine's: not these.)
COLLECTIVE_KERNEL = re.compile(r"^nccl(Dev)?Kernel_(AllReduce|ReduceScatter|AllGather)|all_reduce_kernel"
                               r"|cross_device_reduce|allreduce", re.IGNORECASE)
COLLECTIVE_KIND = ((re.compile(r"ReduceScatter|reduce_scatter", re.IGNORECASE), "reduce_scatter"),
                   (re.compile(r"AllGather|all_gather", re.IGNORECASE), "all_gather"))
# SGLang's DeepEP low-latency experts: the tokens arrive quantised, so the one masked FP8 quantisation
# between the two masked GEMMs is the activation's (SiLU-and-mul fused into it, sgl_kernel's
# per_token_group_quant with fuse_silu_and_mul).
ACT_KERNEL = re.compile(r"silu|act_and_mul|gelu|swiglu|aten::(silu|sigmoid|gelu)$|per_token_group_quant_masked",
                        re.IGNORECASE)

# ---------------------------------------------------------------- attribute names (where recorded)

# The corpus' meta files record each call's qualified name (model.layers.1.self_attn.q_b_proj); the
# last part names the row directly.
ATTENTION_ATTRIBUTES = {
    "q_a_proj": "q_a_proj", "q_a_layernorm": "q_a_layernorm", "q_b_proj": "q_proj_b",
    "kv_a_proj_with_mqa": "kv_a_proj", "kv_a_layernorm": "kv_a_layernorm", "kv_b_proj": "kv_b_proj",
    "fused_qkv_a_proj_with_mqa": "q_a_kv_a", "q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
    "qkv_proj": "qkv_proj", "q_norm": "qk_norm", "k_norm": "qk_norm", "o_proj": "o_proj",
    "rotary_emb": "rotary_emb", "attn_mqa": "attn_core", "attn_mha": "attn_core", "sinks": "attn_core",
}
DENSE_MLP_ATTRIBUTES = {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "gate_up_proj": "gate_up_proj",
                        "act_fn": "act", "down_proj": "down_proj"}

# Attention linears before the core, by count, when no attribute names were recorded: transformers'
# MLA (4), separate q/k/v (3), SGLang's MLA with the fused q_a/kv_a (2), a fused qkv (1).
ATTENTION_LINEARS_BEFORE_CORE = {
    4: ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"],
    3: ["q_proj", "k_proj", "v_proj"],
    2: ["fused_qkv_a_proj_with_mqa", "q_b_proj"],
    1: ["qkv_proj"],
}
# An attention norm is named by the projection it follows.
NORM_AFTER = {"q_a_proj": "q_a_layernorm", "kv_a_proj_with_mqa": "kv_a_layernorm", "q_proj": "q_norm",
              "k_proj": "k_norm", "qkv_proj": "q_norm", "fused_qkv_a_proj_with_mqa": "q_a_layernorm",
              "q_a_layernorm": "kv_a_layernorm", "q_norm": "k_norm"}

# ---------------------------------------------------------------- rows: (D4 group, D4 module)

ROWS = {
    "input_layernorm": ("attention", "input_layernorm"),
    "q_a_proj": ("attention", "q_a_proj"), "q_a_layernorm": ("attention", "q_a_layernorm"),
    "q_proj_b": ("attention", "q_proj_b"), "kv_a_proj": ("attention", "kv_a_proj"),
    "kv_a_layernorm": ("attention", "kv_a_layernorm"), "kv_b_proj": ("attention", "kv_b_proj"),
    "q_a_kv_a": ("attention", "q_a_kv_a"), "qkv_proj": ("attention", "qkv_proj"), "qk_norm": ("attention", "qk_norm"),
    "w_kc bmm": ("attention", "w_kc bmm"), "w_vc bmm": ("attention", "w_vc bmm"),
    "rotary_emb": ("attention", "rotary_emb"), "attn_core": ("attention", "attn_core"),
    "o_proj": ("attention", "o_proj"), "self_attn": ("attention", "self_attn"),
    "post_attention_layernorm": ("gate", "post_attention_layernorm"),
    "router": ("gate", "router"), "topk": ("gate", "topk"),
    "dispatch": ("moe", "dispatch"), "up_gate_gemm": ("moe", "up_gate_gemm"), "silu": ("moe", "silu"),
    "down_gemm": ("moe", "down_gemm"), "experts": ("moe", "experts"), "combine": ("moe", "combine"),
    "shared_experts": ("combine/share overlap", "shared_experts"),
    "gate_up_proj": ("mlp", "gate_up_proj"), "act": ("mlp", "act"), "down_proj": ("mlp", "down_proj"),
    "dense_post_attention_layernorm": ("mlp", "post_attention_layernorm"),
    "residual_add": ("other", "residual_add"),
    "all_reduce": ("communication", "all_reduce"),
    "reduce_scatter": ("communication", "reduce_scatter"),
    "all_gather": ("communication", "all_gather"),
}
# A user's own `record_function("group.module")` range names its kernels' row (the D4 group must be one of GROUPS).
ANNOTATION = re.compile(r"^(?P<group>[a-z][a-z /]*)\.(?P<module>[\w. /-]+)$")
OUTSIDE = "outside"  # before and after the layers (embedding, final norm, LM head, sampling)
GROUPS = ("attention", "gate", "moe", "combine/share overlap", "mlp", "communication", "other", "outside")

# ---------------------------------------------------------------- what the suite compares per row

# The D4 rows the truth names, as compared: a compared row sums the D4 modules listed (the tool's
# names), e.g. SGLang fuses q_a and kv_a into one GEMM that transformers runs as two.
COMPARED_ROWS = {
    "input_layernorm": [("attention", "input_layernorm")],
    "q_a/kv_a": [("attention", m) for m in ("q_a_proj", "kv_a_proj", "q_a_kv_a", "q_a_layernorm",
                                            "kv_a_layernorm", "q_a_kv_a_layernorm")],
    "q_b": [("attention", "q_proj_b")],
    "kv_b": [("attention", "kv_b_proj")],
    "qkv": [("attention", "qkv_proj"), ("attention", "qk_norm")],
    "absorbed bmms": [("attention", "w_kc bmm"), ("attention", "w_vc bmm")],
    "rotary": [("attention", "rotary_emb")],
    # the attention module's own kernels that no child range names (q's concatenation, reshapes)
    # sit beside the core; ranges cannot tell which side, so they are compared with it
    "attn_core": [("attention", "attn_core"), ("attention", "self_attn")],
    "o_proj": [("attention", "o_proj")],
    "post_attention_layernorm": [("gate", "post_attention_layernorm"), ("mlp", "post_attention_layernorm")],
    "router": [("gate", "router")],
    "topk": [("gate", "topk")],
    "dispatch": [("moe", "dispatch")],
    "up_gate": [("moe", "up_gate_gemm")],
    "act": [("moe", "silu")],
    "down": [("moe", "down_gemm")],
    "combine": [("moe", "combine")],
    "shared experts": [("combine/share overlap", "shared_experts")],
    "dense gate_up": [("mlp", "gate_up_proj")],
    "dense act": [("mlp", "act")],
    "dense down": [("mlp", "down_proj")],
    "all_reduce": [("communication", "all_reduce")],
    "reduce_scatter": [("communication", "reduce_scatter")],
    "all_gather": [("communication", "all_gather")],
}
MAX_GROUP_GAP_PP = 3.0  # every D4 group within 3 percentage points of step busy time
MAX_ROW_GAP_PP = 1.0  # every compared row within max(1 point, 20% of the row)
MAX_ROW_GAP_SHARE = 0.20
MIN_MISFILED_PCT = 0.05  # a row under another group than the D4 table's, from this share of busy time on
