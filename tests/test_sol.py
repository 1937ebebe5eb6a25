"""Speed-of-light model against FLOPs and bytes worked out by hand from DeepSeek-V3 shapes.

Shapes used below (public config.json): hidden 7168, q_lora_rank 1536, kv_lora_rank 512,
qk_nope 128, qk_rope 64, v_head 128, 128 heads, moe_intermediate 2048, 256 routed experts, top-8.
FP8 weights carry one FP32 scale per 128x128 block; FP8 activations one FP32 scale per 1x128.
"""
import math

import pytest

from analysis.sol.hardware import HardwareSpecError, load_hardware
from analysis.sol.model_shapes import load_model_shapes
from analysis.sol.estimate import (
    Deployment, SolInputError, attention_costs, layer_sol, moe_costs, sol_by_term, sol_for_d4_rows, sol_time,
)

MODEL = load_model_shapes("deepseek-v3")


def _cost(costs, term):
    (found,) = [c for c in costs if c.term == term]
    return found


@pytest.mark.parametrize("batch", [1, 256])
def test_q_b_projection_flops_and_bytes(batch):
    d = Deployment(batch_per_rank=batch, kv_len=1024)
    c = _cost(attention_costs(MODEL, d), "q_b_proj")
    n = 128 * (128 + 64)  # heads x (nope + rope) = 24576 outputs
    k = 1536  # q_lora_rank
    assert n == 24576
    assert c.flops == 2 * batch * n * k
    weight = 24576 * 1536 * 1 + (24576 // 128) * (1536 // 128) * 4  # fp8 + 192x12 block scales
    act_in = batch * 1536 * 1 + batch * (1536 // 128) * 4  # fp8 activations + 12 scales per token
    out = batch * 24576 * 2  # bf16 output
    assert c.hbm_bytes == weight + act_in + out
    if batch == 1:
        assert c.hbm_bytes == 37_748_736 + 9_216 + 1_536 + 48 + 49_152
    assert c.compute_dtype == "fp8"


def test_q_b_projection_bf16_and_tp_split_heads():
    d = Deployment(batch_per_rank=8, kv_len=1024, tp=4, dp=1, ep=4, weight_dtype="bf16")
    c = _cost(attention_costs(MODEL, d), "q_b_proj")
    n = 32 * 192  # 128 heads / tp 4
    assert c.flops == 2 * 8 * n * 1536
    assert c.hbm_bytes == n * 1536 * 2 + 8 * 1536 * 2 + 8 * n * 2  # no scales in bf16
    assert c.compute_dtype == "bf16"


def test_expert_up_gate_with_all_local_experts_touched():
    # EP32 with DP attention on every rank: 32 ranks x 64 tokens = 2048 tokens, 8 local experts.
    d = Deployment(batch_per_rank=64, kv_len=2048, dp=32, ep=32)
    c = _cost(moe_costs(MODEL, d), "experts_up_gate")
    pairs = 2048 * 8 / 32  # token-expert pairs landing on this rank = 512
    assert pairs == 512
    touched = 8 * (1 - (1 - 8 / 256) ** 2048)  # expected distinct local experts hit
    assert touched == pytest.approx(8.0, abs=1e-9)
    assert c.flops == 2 * 512 * (2 * 2048) * 7168
    per_expert_weight = 4096 * 7168 + (4096 // 128) * (7168 // 128) * 4
    act_in = 512 * 7168 + 512 * 56 * 4
    out = 512 * 4096 * 2
    assert c.hbm_bytes == pytest.approx(touched * per_expert_weight + act_in + out)


def test_expert_up_gate_small_batch_touches_few_experts():
    # EP8, one token per rank: 8 tokens x top-8 = 64 pairs over 256 experts; 32 local experts.
    d = Deployment(batch_per_rank=1, kv_len=2048, dp=8, ep=8)
    c = _cost(moe_costs(MODEL, d), "experts_up_gate")
    touched = 32 * (1 - (248 / 256) ** 8)  # about 7.3 of 32 local experts are read
    assert 7.0 < touched < 7.5
    per_expert_weight = 4096 * 7168 + 32 * 56 * 4
    pairs = 8 * 8 / 8
    assert c.hbm_bytes == pytest.approx(touched * per_expert_weight + pairs * (7168 + 56 * 4) + pairs * 4096 * 2)
    fixed = Deployment(batch_per_rank=1, kv_len=2048, dp=8, ep=8, touched_experts_per_rank=3)
    c3 = _cost(moe_costs(MODEL, fixed), "experts_up_gate")
    assert c3.hbm_bytes == pytest.approx(3 * per_expert_weight + pairs * (7168 + 56 * 4) + pairs * 4096 * 2)


@pytest.mark.parametrize("batch,draft", [(32, 0), (128, 1)])
def test_mla_decode_attention(batch, draft):
    d = Deployment(batch_per_rank=batch, kv_len=2048, mtp_draft_tokens=draft)
    c = _cost(attention_costs(MODEL, d), "mla_attention")
    tokens = batch * (1 + draft)
    # per token and head: q.k over 576 dims (512 latent + 64 rope) and p.v over 512, at 2048 positions
    assert c.flops == 2 * tokens * 128 * 2048 * (576 + 512)
    kv = batch * 2048 * 576 * 2  # latent cache read once per request (MQA-like), bf16
    q = tokens * 128 * 576 * 2
    o = tokens * 128 * 512 * 2
    assert c.hbm_bytes == kv + q + o
    if (batch, draft) == (32, 0):
        assert c.hbm_bytes == 75_497_472 + 4_718_592 + 4_194_304


def test_mla_decode_bound_depends_on_the_ridge_point():
    h200 = load_hardware("h200")
    cost = _cost(attention_costs(MODEL, Deployment(batch_per_rank=32, kv_len=2048)), "mla_attention")
    small = sol_time(cost, h200)
    # AI ~ 2*128*1088 / (576*2) = 242 FLOP/B per cached position; H200 ridge 989.5/4.8 = 206 FLOP/B,
    # H800 ridge 989.5/3.35 = 295 FLOP/B: the same kernel is compute bound on one, memory bound on the other
    assert small.bound == "compute"
    assert sol_time(cost, load_hardware("h800")).bound == "memory"
    assert small.sol_us == pytest.approx(2 * 32 * 128 * 2048 * 1088 / 989.5e12 * 1e6)
    # fp8 KV halves the bytes and uses the fp8 peak
    fp8 = sol_time(_cost(attention_costs(MODEL, Deployment(batch_per_rank=32, kv_len=2048, kv_dtype="fp8")),
                         "mla_attention"), h200)
    assert fp8.compute_us == pytest.approx(small.compute_us / 2)


def test_sol_picks_the_larger_of_compute_and_memory():
    h800 = load_hardware("h800")
    c = _cost(attention_costs(MODEL, Deployment(batch_per_rank=1, kv_len=1024)), "q_b_proj")
    s = sol_time(c, h800)
    assert s.bound == "memory"
    assert s.sol_us == pytest.approx(c.hbm_bytes / 3.35e12 * 1e6)
    assert s.compute_us < s.memory_us


def test_dispatch_and_combine_network_bytes_ep16_over_two_nodes():
    d = Deployment(batch_per_rank=128, kv_len=4096, dp=16, ep=16)
    by = sol_by_term(layer_sol(MODEL, d, "h800"))
    messages = 128 * 8
    # destinations uniform over 16 ranks: 1 self, 7 NVLink peers, 8 on the other node (RDMA)
    assert by["dispatch"].net_bytes == pytest.approx(messages * 15 / 16 * (7168 + 56 * 4))
    assert by["combine"].bound == "network"
    assert by["combine"].sol_us == pytest.approx(messages * 8 / 16 * 7168 * 2 / 50e9 * 1e6)


def test_step_sol_counts_dense_and_moe_layers():
    s = layer_sol(MODEL, Deployment(batch_per_rank=64, kv_len=2048, dp=8, ep=8), "b200")
    expected = (61 * sum(x.sol_us for x in s.attention) + 58 * sum(x.sol_us for x in s.moe)
                + 3 * sum(x.sol_us for x in s.dense_mlp) + sum(x.sol_us for x in s.head))
    assert s.step_us == pytest.approx(expected)
    assert math.isfinite(s.step_us) and s.step_us > 0


def test_sol_for_d4_rows_gives_each_term_once_and_skips_unknown_rows():
    rows = [
        {"group": "attention", "module": "q_proj_b", "kernel": "per_token_group_quant_fp8", "value_us": 2.0},
        {"group": "attention", "module": "q_proj_b", "kernel": "deep_gemm::sm100_fp8_gemm", "value_us": 19.0},
        {"group": "attention", "module": "attn_mqa", "kernel": "mhaSm100fKernel_Qkv", "value_us": 255.0},
        ("moe", "combine", 394.0, "deep_ep::internode_ll::combine"),
        {"group": "attention", "module": "sum", "kernel": "", "value_us": 388.0},
        {"group": "other", "module": "mystery", "kernel": "foo", "value_us": 3.0},
    ]
    d = Deployment(batch_per_rank=128, kv_len=4096, dp=128, ep=128)
    out = sol_for_d4_rows(rows, d, "h800")
    assert [r.term for r in out] == [None, "q_b_proj", "mla_attention", "combine", None, None]
    terms = sol_by_term(layer_sol(MODEL, d, "h800"))
    assert out[1].sol_us == pytest.approx(terms["q_b_proj"].sol_us)
    assert out[1].sol_pct == pytest.approx(100 * terms["q_b_proj"].sol_us / 19.0)
    assert out[3].bound == "network"


def test_bad_inputs_name_what_is_wrong():
    with pytest.raises(SolInputError, match="batch_per_rank"):
        layer_sol(MODEL, Deployment(batch_per_rank=0, kv_len=10), "h200")
    with pytest.raises(SolInputError, match="kv_dtype"):
        layer_sol(MODEL, Deployment(batch_per_rank=1, kv_len=10, kv_dtype="int4"), "h200")
    with pytest.raises(HardwareSpecError, match="built-ins"):
        load_hardware("a100x")


def test_every_hardware_file_has_sourced_peaks():
    for name in ("h800", "h100", "h200", "b200"):
        hw = load_hardware(name)
        for peak in hw.peaks.values():
            assert peak.value > 0 and peak.source
        assert hw.peak("fp8_flops_per_s") == pytest.approx(2 * hw.peak("bf16_flops_per_s"))


def test_model_file_keeps_top_level_keys_for_segmentation():
    import yaml
    from analysis.sol.model_shapes import MODELS_DIR
    raw = yaml.safe_load((MODELS_DIR / "deepseek-v3.yaml").read_text())
    assert (raw["name"], raw["num_layers"], raw["first_k_dense_replace"], raw["mtp_layers"]) == ("deepseek-v3", 61, 3, 1)
    assert MODEL.moe_layers == 58


def test_module_map_covers_the_deepseek_signatures_row_for_row():
    # (group, module, kernel) as the sglang-sm90-deepep-ll signature prints them, in layer order
    rows = [("attention", "input_layernorm", "FusedAddRMSNorm"), ("attention", "q_a_kv_a", "per_token_group_quant"),
            ("attention", "q_a_kv_a", "deep_gemm"), ("attention", "q_a_kv_a_layernorm", "RMSNormKernel"),
            ("attention", "q_proj_b", "per_token_group_quant"), ("attention", "q_proj_b", "deep_gemm"),
            ("attention", "w_kc bmm", "nvjet"), ("attention", "rotary_emb", "rotary"),
            ("attention", "attn_mqa", "get_mla_metadata"), ("attention", "attn_mqa", "flash_mla"),
            ("attention", "attn_mqa", "flash_mla_combine"), ("attention", "w_vc bmm", "nvjet"),
            ("attention", "o_proj", "per_token_group_quant"), ("attention", "o_proj", "deep_gemm"),
            ("gate", "post_attention_layernorm", "FusedAddRMSNorm"), ("gate", "router", "router_gemm"),
            ("gate", "topk", "moe_fused_gate"), ("moe", "dispatch", "deep_ep dispatch"),
            ("moe", "up_gate_gemm", "deep_gemm masked"), ("moe", "silu", "silu_and_mul_post_quant"),
            ("moe", "down_gemm", "deep_gemm masked"), ("moe", "combine", "deep_ep combine"),
            ("combine/share overlap", "shared_experts", "per_token_group_quant"),
            ("combine/share overlap", "shared_experts", "deep_gemm gate_up"),
            ("combine/share overlap", "shared_experts", "act_and_mul"),
            ("combine/share overlap", "shared_experts", "deep_gemm down"),
            ("mlp", "dense_gate_up", "deep_gemm"), ("mlp", "dense_act", "act_and_mul"), ("mlp", "dense_down", "deep_gemm"),
            ("other", "lm_head / sampling", "(any)")]
    d4 = [{"group": g, "module": m, "kernel": k, "value_us": 10.0} for g, m, k in rows]
    out = sol_for_d4_rows(d4, Deployment(batch_per_rank=64, kv_len=2048, dp=8, ep=8), "h200")
    got = {(r.module, r.kernel): r.term for r in out}
    assert got[("q_a_kv_a", "deep_gemm")] == "q_a_kv_a_proj" and got[("q_a_kv_a", "per_token_group_quant")] is None
    assert got[("attn_mqa", "flash_mla")] == "mla_attention"  # the attention kernel, not its metadata kernel
    assert got.get(("attn_mqa", "get_mla_metadata")) is None
    assert got[("w_kc bmm", "nvjet")] == "w_uk_bmm" and got[("w_vc bmm", "nvjet")] == "w_uv_bmm"
    assert got[("shared_experts", "deep_gemm gate_up")] == "shared_up_gate"
    assert got[("shared_experts", "deep_gemm down")] == "shared_down"
    assert got[("dense_act", "act_and_mul")] == "dense_silu"
    assert got[("topk", "moe_fused_gate")] is None
    terms = [r.term for r in out if r.term]
    assert len(terms) == len(set(terms)) == 23  # 9 attention, 2 gate, 5 moe, 3 shared, 3 dense, lm_head
    seed_bmm = sol_for_d4_rows([("attention", "torch.bmm transpose(0,1)", 16.0, "nvjet_tst_256x128"),
                                ("attention", "torch.bmm transpose(0,1)", 15.0, "nvjet_tst_64x128")],
                               Deployment(batch_per_rank=64, kv_len=2048), "b200")
    assert [r.term for r in seed_bmm] == ["w_uk_bmm", "w_uv_bmm"]


# ---- the expanded MLA form (transformers) on the deepseek-v3-wide4 shapes --------------------------
# Same attention widths as DeepSeek-V3 (above); bf16 weights carry no scales.
WIDE4 = load_model_shapes("deepseek-v3-wide4")


def _expanded(batch, kv_len):
    return Deployment(batch_per_rank=batch, kv_len=kv_len, weight_dtype="bf16", mla_form="expanded")


@pytest.mark.parametrize("batch", [1, 32])
def test_kv_b_projection_flops_and_bytes(batch):
    c = _cost(attention_costs(WIDE4, _expanded(batch, 133)), "kv_b_proj")
    n = 128 * (128 + 128)  # heads x (nope + v) = 32768 outputs
    k = 512  # kv_lora_rank
    assert c.flops == 2 * batch * n * k  # the T new tokens only, never the cache
    assert c.hbm_bytes == n * k * 2 + batch * k * 2 + batch * n * 2
    if batch == 32:
        assert (c.flops, c.hbm_bytes) == (1_073_741_824, 33_554_432 + 32_768 + 2_097_152)


@pytest.mark.parametrize("batch,kv_len", [(1, 1024), (32, 133)])
def test_expanded_attention_core_reads_per_head_k_and_v(batch, kv_len):
    c = _cost(attention_costs(WIDE4, _expanded(batch, kv_len)), "mla_attention")
    heads, qk, v = 128, 128 + 64, 128
    assert c.flops == 2 * batch * heads * kv_len * qk + 2 * batch * heads * kv_len * v
    cache = batch * kv_len * heads * (qk + v) * 2  # K (nope + rope) and V per head, bf16
    new_kv = batch * heads * (qk + v) * 2  # the new tokens' K and V written
    q, out = batch * heads * qk * 2, batch * heads * v * 2
    assert c.hbm_bytes == cache + new_kv + q + out
    if (batch, kv_len) == (32, 133):
        assert c.hbm_bytes == 348_651_520 + 2_621_440 + 1_572_864 + 1_048_576


def test_forms_differ_in_terms_norms_and_residual_adds():
    t, h = 32, 7168
    exp = {c.term: c for c in attention_costs(WIDE4, _expanded(t, 133))}
    absorbed = {c.term: c for c in attention_costs(WIDE4, Deployment(batch_per_rank=t, kv_len=133, weight_dtype="bf16"))}
    assert {"kv_b_proj", "residual_add"} <= set(exp) and not {"w_uk_bmm", "w_uv_bmm"} & set(exp)
    assert {"w_uk_bmm", "w_uv_bmm"} <= set(absorbed) and not {"kv_b_proj", "residual_add"} & set(absorbed)
    # transformers: plain RMSNorm (x in, y out) and two adds per layer (each: 2 T h in, T h out)
    assert exp["input_layernorm"].hbm_bytes == 2 * t * h * 2 + h * 2
    assert absorbed["input_layernorm"].hbm_bytes == 4 * t * h * 2 + h * 2  # fused add + RMSNorm
    assert exp["residual_add"].hbm_bytes == 2 * 3 * t * h * 2
    moe = {c.term: c for c in moe_costs(WIDE4, _expanded(t, 133))}
    assert moe["post_attention_layernorm"].hbm_bytes == 2 * t * h * 2 + h * 2
    for term in ("q_a_kv_a_proj", "q_b_proj", "o_proj", "rotary_emb", "q_kv_a_layernorm"):
        assert exp[term] == absorbed[term], term  # the same work in both forms
    with pytest.raises(SolInputError, match="mla_form must be absorbed or expanded, got 'naive'"):
        layer_sol(WIDE4, Deployment(batch_per_rank=1, kv_len=1, mla_form="naive"), "h100")


def test_wide4_counts_one_dense_and_three_moe_layers():
    assert (WIDE4.num_layers, WIDE4.first_k_dense_replace, WIDE4.moe_layers, WIDE4.n_routed_experts) == (4, 1, 3, 128)
    s = layer_sol(WIDE4, _expanded(32, 133), "h100")
    expected = (4 * sum(x.sol_us for x in s.attention) + 3 * sum(x.sol_us for x in s.moe)
                + 1 * sum(x.sol_us for x in s.dense_mlp) + sum(x.sol_us for x in s.head))
    assert s.step_us == pytest.approx(expected)


def test_composite_map_entries_sum_their_terms_and_skip_absent_ones(tmp_path):
    d = Deployment(batch_per_rank=8, kv_len=512)  # absorbed: no kv_b_proj term
    mapping = tmp_path / "map.yaml"
    mapping.write_text("entries:\n"
                       "  - {terms: [q_b_proj, kv_b_proj, o_proj], group: '^a$'}\n"
                       "  - {terms: [kv_b_proj], group: '^b$'}\n"
                       "  - {term: o_proj, group: '^c$'}\n")
    rows = [("a", "m", 10.0, "k"), ("b", "m", 5.0, "k"), ("c", "m", 5.0, "k"), ("a", "m", 10.0, "k")]
    out = sol_for_d4_rows(rows, d, "h800", module_map=str(mapping))
    terms = sol_by_term(layer_sol(MODEL, d, "h800"))
    q_b, o = terms["q_b_proj"], terms["o_proj"]
    assert out[0].term == "q_b_proj+o_proj"
    assert out[0].sol_us == pytest.approx(q_b.sol_us + o.sol_us)
    assert out[0].sol_pct == pytest.approx(100 * (q_b.sol_us + o.sol_us) / 10.0)
    assert out[0].bound == max(q_b, o, key=lambda s: s.sol_us).bound
    assert (out[0].flops, out[0].hbm_bytes) == (q_b.flops + o.flops, q_b.hbm_bytes + o.hbm_bytes)
    assert out[1].term is None  # kv_b_proj only: nothing left in the absorbed form
    assert out[2].term is None and out[3].term is None  # o_proj (and the composite) already taken
    bad = tmp_path / "bad.yaml"
    bad.write_text("entries:\n  - {term: o_proj, terms: [q_b_proj], group: x}\n")
    from analysis.sol.sol_module_map import ModuleMapError, load_module_map
    with pytest.raises(ModuleMapError, match=r"entries\[0\] needs a `term` or a non-empty `terms` list"):
        load_module_map(str(bad))
    bad.write_text("entries:\n  - {terms: [], group: x}\n")
    with pytest.raises(ModuleMapError, match=r"entries\[0\]"):
        load_module_map(str(bad))


# Whole kernel names as real traces write them (the analysis keeps them whole in the kernel column):
# which SOL term a row gets must follow what the kernel is, not words in its return type, its
# parameters or the source file name a mangled name carries. The expected terms are read off the names.
_RMS_NORM_VLLM = ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
                  "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, "
                  "c10::BFloat16 const*, float, int, int)")  # vLLM eager trace (../shared/traces/real)
_NORMAL_RANDOM = ("_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_17e44f7d43distribution_elementwise"
                  "_grid_stride_kernelIfLi4EZZZNS0_9templates4cuda20normal_and_transformIffPNS_17CUDAGeneratorImplE"
                  "ZZZNS4_13normal_kernelIS7_EEvRKNS_10TensorBaseEddT_ENKUlvE_clEvENKUlvE0_clEvEUlfE_EEvRNS_18Tensor"
                  "IteratorBaseET1_T2_ENKUlvE_clEvENKUlvE2_clEvEUlP24curandStatePhilox4_32_10E0_ZNS1_27distribution"
                  "_nullary_kernelIffLi4ES7_SP_SJ_EEvSL_T2_RKT3_T4_EUlifE_EEvlNS_15PhiloxCudaStateET1_SM_")  # a training trace
_FLASH_WRAPPED = ("cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, "
                  "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1>>>>>(flash::FlashAttnFwdSm90<>::Params)")


@pytest.mark.parametrize("group, module, kernel, terms", [
    ("gate", "post_attention_layernorm", _RMS_NORM_VLLM, ("post_attention_layernorm",)),  # norm in its own name
    ("gate", "post_attention_layernorm", _NORMAL_RANDOM, ()),  # random numbers: "Normal" is its source file's name
    ("attention", "attn_core", _FLASH_WRAPPED, ("mla_attention",)),  # the attention inside a wrapper kernel
])
def test_a_sol_kernel_pattern_reads_the_kernels_own_name(group, module, kernel, terms):
    from analysis.sol.sol_module_map import assign_terms, load_module_map

    assert assign_terms(load_module_map(), [(group, module, kernel)])[0] == terms  # one row alone
