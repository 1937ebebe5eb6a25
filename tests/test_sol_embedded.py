"""SOL columns for the embedded engine on the REAL H100 demo_gpu trace (tests/data, docs/gpu-runs.md):
the settings come from the demo_gpu scenario, whole-module rows get composite terms, and the experts
row's SOL is checked against a sum worked out by hand from the wide-gpu preset's shapes."""
import json
from pathlib import Path

import pytest

from analysis.pipeline import AnalysisOptions, analyze, load_column, write_outputs
from analysis.sol.hardware import load_hardware
from analysis.sol.estimate import sol_for_d4_rows
from harness.scenario import load_scenario, parse_scenario, scenario_to_yaml
from harness.scenario_sol import sol_settings_for

TRACE = Path(__file__).parent / "data" / "embedded-h100-demo_gpu-TP-0-DECODE.trace.json.gz"
SIGNATURE = "embedded-hf-deepseek-v3-cuda"
# H100 SXM datasheet peaks (analysis/data/hardware/h100.yaml): dense BF16 FLOP/s and HBM3 bytes/s
BF16_FLOPS, HBM_BYTES = 989.5e12, 3.35e12


@pytest.fixture(scope="module")
def analysed():
    settings, why = sol_settings_for(load_scenario("demo_gpu")[0])
    assert settings is not None, why
    return settings, analyze([str(TRACE)], signature=SIGNATURE, options=AnalysisOptions(run="h100", sol=settings))


def test_demo_gpu_scenario_settings():
    settings, why = sol_settings_for(load_scenario("demo_gpu")[0])
    d = settings.deployment
    assert (why, settings.model, settings.hardware) == ("", "deepseek-v3-wide4", "h100")
    # batch 32 on one GPU; KV = 128 input + 5 warm-up steps; bf16 weights and cache; transformers' MLA
    assert (d.batch_per_rank, d.kv_len, d.tp, d.dp, d.ep, d.mtp_draft_tokens) == (32, 133, 1, 1, 1, 0)
    assert (d.weight_dtype, d.kv_dtype, d.mla_form) == ("bf16", "bf16", "expanded")
    # a model override the shapes file does not describe gives no SOL, and says why
    text = scenario_to_yaml(load_scenario("demo_gpu")[0])
    halved = parse_scenario(text.replace("n_routed_experts: null", "n_routed_experts: 64"), "t.yaml")
    none, why = sol_settings_for(halved)
    assert none is None and "n_routed_experts 64 != 128" in why


def test_every_module_gets_a_sol_on_its_main_kernel(analysed):
    """Rows are the seed table's modules (the trace's module ranges under the standard role map); each
    module the SOL model has a term for carries it on the row of its main kernel."""
    _, result = analysed
    terms, shared = {}, []
    for r in result.d4.rows:
        if r.sol_term and r.group == "combine/share overlap":
            shared.append(r.sol_term)  # one module, its GEMMs on two kernel rows
        elif r.sol_term:
            assert (r.group, r.module) not in terms, (r.group, r.module)
            terms[(r.group, r.module)] = (r.sol_term, r.kernel, r)
    expected = {
        ("attention", "input_layernorm"): "input_layernorm", ("attention", "q_a_proj"): "q_a_kv_a_proj",
        ("attention", "q_a_layernorm"): "q_kv_a_layernorm", ("attention", "q_proj_b"): "q_b_proj",
        ("attention", "kv_b_proj"): "kv_b_proj", ("attention", "rotary_emb"): "rotary_emb",
        ("attention", "attn_core"): "mla_attention", ("attention", "o_proj"): "o_proj",
        ("gate", "router"): "router_gemm", ("moe", "up_gate_gemm"): "experts_up_gate",
        ("moe", "silu"): "experts_silu", ("moe", "down_gemm"): "experts_down",
        ("mlp", "post_attention_layernorm"): "post_attention_layernorm", ("mlp", "gate_up_proj"): "dense_up_gate",
        ("mlp", "act"): "dense_silu", ("mlp", "down_proj"): "dense_down", ("other", "residual_add"): "residual_add",
    }
    assert {k: v[0] for k, v in terms.items() if k in expected} == expected
    assert "sdpa" in terms[("attention", "attn_core")][1]  # the attention kernel, not the cache copies
    # the experts' weighted sum runs as a local add in the combine module: it moves nothing between
    # GPUs, so it takes no share of the all-to-all's term (its weighted sum is not modelled)
    combine = [r for r in result.d4.rows if (r.group, r.module) == ("moe", "combine")]
    assert combine and all("CUDAFunctor_add" in r.kernel and r.sol_term is None for r in combine)
    for key, (term, _kernel, r) in terms.items():
        assert r.sol_us > 0 and 0 < r.sol_pct <= 100, key
        assert r.bound == "memory", key  # batch 32 in bf16: every module is under the H100 ridge point
    assert shared == ["shared_up_gate", "shared_silu", "shared_down"], shared  # the silu kernel: its whole name says silu


def test_experts_rows_equal_the_hand_computed_sum(analysed):
    settings, result = analysed
    hw = load_hardware("h100")
    assert (hw.peak("bf16_flops_per_s"), hw.peak("hbm_bytes_per_s")) == (BF16_FLOPS, HBM_BYTES)
    t, h, inter, experts, top_k = 32, 7168, 2048, 128, 8
    touched = experts * (1 - (1 - top_k / experts) ** t)  # ~111.8 distinct experts hit by 32 tokens
    pairs = t * top_k  # 256 token-expert pairs
    up_flops = 2 * pairs * (2 * inter) * h
    up_bytes = touched * (2 * inter) * h * 2 + pairs * h * 2 + pairs * 2 * inter * 2
    silu_bytes = pairs * 2 * inter * 2 + pairs * inter * 2
    down_flops = 2 * pairs * h * inter
    down_bytes = touched * h * inter * 2 + pairs * inter * 2 + pairs * h * 2
    expected_us = 1e6 * (max(up_flops / BF16_FLOPS, up_bytes / HBM_BYTES) + silu_bytes / HBM_BYTES
                         + max(down_flops / BF16_FLOPS, down_bytes / HBM_BYTES))
    rows = {r.module: r for r in result.d4.rows if r.group == "moe" and r.sol_term}
    assert sum(rows[m].sol_us for m in ("up_gate_gemm", "silu", "down_gemm")) == pytest.approx(expected_us, rel=1e-12)
    assert expected_us == pytest.approx(2942.8, abs=0.1)
    assert rows["up_gate_gemm"].sol_us == pytest.approx(1e6 * max(up_flops / BF16_FLOPS, up_bytes / HBM_BYTES))
    assert rows["up_gate_gemm"].sol_pct == pytest.approx(100 * rows["up_gate_gemm"].sol_us / rows["up_gate_gemm"].value_us)
    # the same rows through sol_for_d4_rows also carry their FLOPs and bytes (per layer)
    sols = {(s.group, s.module): s for s in sol_for_d4_rows(result.d4.rows, settings.deployment, "h100",
                                                             model=settings.model) if s.term}
    assert sols[("moe", "up_gate_gemm")].flops + sols[("moe", "down_gemm")].flops == up_flops + down_flops
    assert sum(sols[("moe", m)].hbm_bytes for m in ("up_gate_gemm", "silu", "down_gemm")) == pytest.approx(
        up_bytes + silu_bytes + down_bytes, rel=1e-12)
    assert ("moe", "combine") not in sols


def test_settings_and_columns_round_trip_through_analysis_json(analysed, tmp_path):
    settings, result = analysed
    write_outputs(result, tmp_path)
    saved = load_column(tmp_path)
    assert saved.sol == settings and saved.sol.deployment.mla_form == "expanded"
    assert [(r.sol_us, r.sol_pct, r.bound, r.sol_term) for r in saved.rows] == \
        [(r.sol_us, r.sol_pct, r.bound, r.sol_term) for r in result.d4.rows]
    assert "MLA expanded" in (tmp_path / "d4.md").read_text()


def test_sol_peaks_follow_the_gpu_the_engine_reports():
    from harness.scenario_sol import hardware_for_device

    assert hardware_for_device("NVIDIA H200") == "h200"
    assert hardware_for_device("NVIDIA H100 80GB HBM3") == "h100"
    assert hardware_for_device("NVIDIA H20") is None  # no peaks file: keep the scenario's
    assert hardware_for_device("cpu") is None and hardware_for_device(None) is None


def test_a_demo_gpu_run_on_an_h200_gets_h200_peaks(tmp_path):
    """The embedded engine's analyse on the real H200 trace: the scenario says H100, the engine reported an H200."""
    from harness.engines.embedded.analyse import analyse
    from harness.scenario import load_scenario

    trace = Path(__file__).parent / "data" / "embedded-h200-demo_gpu-TP-0-DECODE.trace.json.gz"
    done = analyse([trace], load_scenario("demo_gpu")[0], "h200-check", tmp_path / "analysis",
                   device_name="NVIDIA H200")
    assert "SOL peaks: h200 (the engine ran on NVIDIA H200; the scenario says h100)" in done.table
    saved = json.loads(Path(done.files["analysis.json"]).read_text())["d4"]["sol"]
    assert saved["hardware"] == "h200" and saved["deployment"]["mla_form"] == "expanded"
