"""The structural attribution's positional rules (analysis/attribution/structure.py), one by one, on
small SYNTHETIC kernel sequences whose answers are known by construction: a step of a DeepSeek-V3-like
model (an embedding, one dense and two MoE decoder layers with absorbed MLA, the final norm and the LM
head) written kernel by kernel with names of the classes each position holds (kernel_classes.yaml),
and variants that change one thing. Each kernel's role and the rule that gave it
(`structure_rules.yaml:<name>`) are checked; the rules file is read here with yaml, not through the
analysis' loaders.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from analysis.attribution import structure
from analysis.attribution.structure import cut_structural, routed_rules
from analysis.ingest.trace_model import Kernel

RULES_FILE = Path(structure.__file__).resolve().parents[1] / "data" / "rules" / "structure_rules.yaml"

# kernel names by class (each matches its class's regex in kernel_classes.yaml)
NORM, GEMM, ATTN, ROTARY, KV_WRITE = "rms_norm_kernel", "nvjet_tst_64x8_64x16", "flash::flash_fwd_splitkv_mla_kernel", \
    "rotary_embedding_kernel", "store_kvcache_kernel"
ROUTER, TOPK, PREP, EXPERT, ACT, FINALIZE = "dsv3_router_gemm_kernel", "moe_fused_gate_kernel", \
    "moe_align_block_size_kernel", "fused_moe_kernel", "act_and_mul_kernel", "moe_sum_reduce_kernel"
ADD, ALLREDUCE, DISPATCH, COMBINE = "vectorized_elementwise_kernel_add", "ncclDevKernel_AllReduce_Sum_bf16", \
    "deep_ep::internode_ll::dispatch", "deep_ep::internode_ll::combine"

ATTENTION = [  # (name, role, rule) of one layer's attention, absorbed MLA
    (NORM, "input_layernorm", "pre.input_norm"),
    (GEMM, "q_a_kv_a", "pre.projections_absorbed_mla"),
    (NORM, "q_a_kv_a_layernorm", "pre.projection_norm"),
    (GEMM, "q_b_proj", "pre.projections_absorbed_mla"),
    (GEMM, "w_kc_bmm", "pre.projections_absorbed_mla"),
    (ROTARY, "rotary_emb", "pre.by_class"),
    (KV_WRITE, "attn_core", "pre.by_class"),
    (ATTN, "attn_core", "core.attention_cluster"),
    (GEMM, "w_vc_bmm", "post.w_vc_absorbed"),
    (GEMM, "o_proj", "post.o_proj"),
    (ADD, "residual_add", "post.residual_add"),
    (NORM, "post_attention_layernorm", "post.attention_norm"),
]
DENSE_MLP = [
    (GEMM, "gate_up_proj", "dense.gate_up_proj"),
    (ACT, "mlp_act", "dense.act"),
    (GEMM, "down_proj", "dense.down_proj"),
]
MOE = [
    (ROUTER, "router", "moe.router"),
    (TOPK, "topk", "moe.topk"),
    (PREP, "experts", "routed.other"),
    (EXPERT, "up_gate_gemm", "routed.up_gate"),
    (ACT, "expert_act", "routed.act"),
    (EXPERT, "down_gemm", "routed.down"),
    (FINALIZE, "combine", "routed.combine"),
    (GEMM, "shared_experts", "moe.shared_span"),
    (ACT, "shared_experts", "moe.shared_span"),
    (GEMM, "shared_experts", "moe.shared_span"),
    (ADD, "residual_add", "moe.after_experts"),
]
EMBED = "embedding_lookup_kernel"
BEFORE = [(EMBED, "embedding", "outside.before_layers")]
AFTER = [(NORM, "lm_head", "outside.after_layers"), (GEMM, "lm_head", "outside.after_layers"),
         (ADD, "lm_head", "outside.after_layers")]


def _kernels(names: list[str], stream: int = 7, start_us: float = 0.0) -> list[Kernel]:
    return [Kernel(name, stream, start_us + 10.0 * i, 8.0, i, "cudaLaunchKernel") for i, name in enumerate(names)]


def _step(layers: list[list[tuple[str, str, str]]]) -> list[tuple[str, str, str]]:
    return [*BEFORE, *(entry for layer in layers for entry in layer), *AFTER]


def _named(expected: list[tuple[str, str, str]], kernels: list[Kernel] | None = None) -> list[tuple[str, str, str]]:
    cut = cut_structural(kernels or _kernels([name for name, _role, _rule in expected]))
    assert cut is not None
    return [(k.name, slot.role, slot.rule.removeprefix("structure_rules.yaml:"))
            for k, slot in zip(kernels or _kernels([n for n, _r, _u in expected]), cut.slots)]


def test_a_dense_and_two_moe_layers_get_each_role_from_its_rule():
    expected = _step([ATTENTION + DENSE_MLP + [(ADD, "residual_add", "dense.residual_add")],
                      ATTENTION + MOE, ATTENTION + MOE])
    assert _named(expected) == expected


def test_an_all_reduce_after_o_proj_makes_the_copy_beside_it_o_projs():
    tp_attention = ATTENTION[:10] + [(ADD, "o_proj", "post.o_proj_before_reduce"),
                                     (ALLREDUCE, "all_reduce", "post.collective")] + ATTENTION[11:]
    expected = _step([tp_attention + DENSE_MLP, tp_attention + MOE, tp_attention + MOE])
    assert _named(expected) == expected


def test_projections_without_norms_between_them_are_qkv():
    gqa = [(NORM, "input_layernorm", "pre.input_norm"), (GEMM, "qkv_proj", "pre.projections"),
           (ROTARY, "rotary_emb", "pre.by_class"), (ATTN, "attn_core", "core.attention_cluster"),
           (GEMM, "o_proj", "post.o_proj"), (NORM, "post_attention_layernorm", "post.attention_norm")]
    expected = _step([gqa + DENSE_MLP, gqa + DENSE_MLP, gqa + DENSE_MLP])
    assert _named(expected) == expected


def test_the_rotary_written_out_is_the_arithmetic_among_the_projections():
    """No rotary kernel on the stack: two or more elementwise kernels right before the core are it."""
    written = [(NORM, "input_layernorm", "pre.input_norm"), (GEMM, "qkv_proj", "pre.projections"),
               (ADD, "rotary_emb", "pre.rotary_written_out"), (ADD, "rotary_emb", "pre.rotary_written_out"),
               (ATTN, "attn_core", "core.attention_cluster"), (GEMM, "o_proj", "post.o_proj"),
               (NORM, "post_attention_layernorm", "post.attention_norm")]
    expected = _step([written + DENSE_MLP] * 3)
    assert _named(expected) == expected


def test_a_shared_expert_between_the_router_and_top_k_is_not_a_routed_expert():
    """SGLang's DeepEP path launches the shared expert between the router GEMM and top-k."""
    deepep = [(ROUTER, "router", "moe.router"), (GEMM, "shared_experts", "moe.shared_span"),
              (ACT, "shared_experts", "moe.shared_span"), (GEMM, "shared_experts", "moe.shared_span"),
              (TOPK, "topk", "moe.topk"), (DISPATCH, "dispatch", "routed.dispatch"),
              (EXPERT, "up_gate_gemm", "routed.up_gate"), (ACT, "expert_act", "routed.act"),
              (EXPERT, "down_gemm", "routed.down"), (COMBINE, "combine", "routed.combine")]
    expected = _step([ATTENTION + DENSE_MLP, ATTENTION + deepep, ATTENTION + deepep])
    assert _named(expected) == expected


def test_a_side_stream_running_gemms_after_the_attention_is_the_shared_expert():
    """The shared expert on a second stream, overlapped with the routed experts of a MoE layer."""
    layers = [ATTENTION + DENSE_MLP, ATTENTION + MOE[:7] + [MOE[-1]], ATTENTION + MOE[:7] + [MOE[-1]]]
    expected = _step(layers)
    main = _kernels([name for name, _role, _rule in expected])
    routed_up = [i for i, (name, _role, _rule) in enumerate(expected) if name == EXPERT][::2]
    side = [Kernel(name, 9, main[i].start_us + 1.0 + j, 0.5, 1000 + 10 * i + j, "cudaLaunchKernel")
            for i in routed_up[1:] for j, name in enumerate((GEMM, ACT, GEMM))]
    kernels = sorted(main + side, key=lambda k: k.start_us)
    cut = cut_structural(kernels)
    on_side = {(k.name, slot.role, slot.rule) for k, slot in zip(kernels, cut.slots) if k.stream == 9}
    assert on_side == {(GEMM, "shared_experts", "structure_rules.yaml:side.shared_experts"),
                       (ACT, "shared_experts", "structure_rules.yaml:side.shared_experts")}


@pytest.mark.parametrize("kinds,calls,expected", [
    (["expert_gemm", "act", "expert_gemm"], [1, None, 2],
     [("up_gate_gemm", "routed.up_gate"), ("expert_act", "routed.act"), ("down_gemm", "routed.down")]),
    # a per-expert loop: the pair again for each expert that got tokens
    (["expert_gemm", "expert_gemm", "expert_gemm", "expert_gemm"], [1, 2, 3, 4],
     [("up_gate_gemm", "routed.up_gate"), ("down_gemm", "routed.down")] * 2),
    # an all-to-all before the first GEMM and after the last: dispatch, and what follows the return, combine
    (["moe_prep", "a2a", "expert_gemm", "expert_gemm", "a2a", "moe_finalize"], [None, None, 1, 2, None, None],
     [("dispatch", "routed.dispatch"), ("dispatch", "routed.dispatch"), ("up_gate_gemm", "routed.up_gate"),
      ("down_gemm", "routed.down"), ("combine", "routed.combine"), ("combine", "routed.combine")]),
])
def test_the_routed_stretch_numbers_its_gemm_calls(kinds, calls, expected):
    got = routed_rules(kinds, calls)
    assert [(role, rule.removeprefix("structure_rules.yaml:")) for role, rule in got] == expected


def test_the_rules_files_and_the_code_name_the_same_rules():
    """Every rule the code names is in its file (and the reverse): no entry explains nothing, no row
    names an entry that is not there. Read with yaml and from the text of structure.py, of the two
    passes that name kernels by what ran them (off_thread.py, shared_stream.py) and of module_roles.py."""
    in_file = set(yaml.safe_load(RULES_FILE.read_text())["rules"])
    source = "".join(Path(structure.__file__).with_name(name).read_text()
                     for name in ("structure.py", "off_thread.py", "shared_stream.py"))
    in_code = set(re.findall(r'"((?:core|pre|post|dense|moe|routed|layer|outside|side)\.[a-z_]+)"', source))
    assert in_code == in_file, (sorted(in_code - in_file), sorted(in_file - in_code))
    module_file = RULES_FILE.with_name("module_rules.yaml")
    module_source = (Path(structure.__file__).with_name("module_roles.py")).read_text()
    in_module_code = set(re.findall(r'"((?:moe_block|mlp)\.[a-z_]+)"', module_source))
    assert in_module_code == set(yaml.safe_load(module_file.read_text())["rules"])
