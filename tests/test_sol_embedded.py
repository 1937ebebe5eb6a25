"""SOL columns for the embedded engine on the REAL H100 demo_gpu trace (tests/data, docs/gpu-runs.md):
the settings come from the demo_gpu scenario, whole-module rows get composite terms, and the experts
row's SOL is checked against a sum worked out by hand from the wide-gpu preset's shapes."""
import json
from pathlib import Path

import pytest

from analysis.api import AnalysisOptions, analyze, load_column, write_outputs
from analysis.hardware import load_hardware
from analysis.sol import sol_for_d4_rows
from harness.scenario import load_scenario, parse_scenario, scenario_to_yaml
from harness.scenario_sol import sol_settings_for

TRACE = Path(__file__).parent / "data" / "embedded-h100-demo_gpu-TP-0-DECODE.trace.json.gz"
SIGNATURE = "embedded-hf-deepseek-v3-cuda"
# H100 SXM datasheet peaks (analysis/hardware/h100.yaml): dense BF16 FLOP/s and HBM3 bytes/s
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


def test_every_module_row_gets_a_sol(analysed):
    _, result = analysed
    rows = {(r.group, r.module, r.kernel): r for r in result.d4.rows if r.module != "sum"}
    assert len(rows) == 9
    for key, r in rows.items():
        assert r.sol_us is not None, key
        if key[1] == "combine":  # ep 1: the combine has no network work; its weighted sum is not modelled
            assert (r.sol_term, r.sol_us, r.bound) == ("combine", 0.0, "none")
            continue
        assert r.sol_us > 0 and 0 < r.sol_pct <= 100, key
        assert r.bound == "memory", key  # batch 32 in bf16: every module is under the H100 ridge point
    attn = rows[("attention", "self_attn", "self_attn")]
    assert attn.sol_term == "q_a_kv_a_proj+q_kv_a_layernorm+q_b_proj+kv_b_proj+rotary_emb+o_proj"
    core = [r for k, r in rows.items() if k[1] == "self_attn" and "sdpa" in k[2]]
    assert len(core) == 1 and core[0].sol_term == "mla_attention"
    assert rows[("gate", "gate", "gate")].sol_term == "router_gemm"
    assert rows[("moe", "experts", "experts")].sol_term == "experts_up_gate+experts_silu+experts_down"
    assert rows[("moe", "shared_experts", "shared_experts")].sol_term == "shared_up_gate+shared_silu+shared_down"
    assert rows[("mlp", "mlp", "mlp")].sol_term == "dense_up_gate+dense_silu+dense_down"
    assert rows[("other", "layernorm", "layernorm")].sol_term == "input_layernorm+post_attention_layernorm"
    assert rows[("other", "residual_add", "residual_add")].sol_term == "residual_add"


def test_experts_row_equals_the_hand_computed_sum(analysed):
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
    (row,) = [r for r in result.d4.rows if (r.group, r.module) == ("moe", "experts")]
    assert row.sol_us == pytest.approx(expected_us, rel=1e-12)
    assert expected_us == pytest.approx(2942.8, abs=0.1)
    assert row.sol_pct == pytest.approx(100 * expected_us / row.value_us)
    # the same row through sol_for_d4_rows also carries the summed FLOPs and bytes (per layer)
    sols = {(s.group, s.module): s for s in sol_for_d4_rows(result.d4.rows, settings.deployment, "h100",
                                                             model=settings.model)}
    assert sols[("moe", "experts")].flops == up_flops + down_flops
    assert sols[("moe", "experts")].hbm_bytes == pytest.approx(up_bytes + silu_bytes + down_bytes, rel=1e-12)
    assert (sols[("moe", "combine")].flops, sols[("moe", "combine")].hbm_bytes) == (0.0, 0.0)


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
    """run.analyse on the real H200 trace: the scenario says H100, the engine reported an H200."""
    from harness.run import analyse
    from harness.scenario import load_scenario

    trace = Path(__file__).parent / "data" / "embedded-h200-demo_gpu-TP-0-DECODE.trace.json.gz"
    table, files = analyse([trace], load_scenario("demo_gpu")[0], "h200-check", tmp_path / "analysis",
                           device_name="NVIDIA H200")
    assert "SOL peaks: h200 (the engine ran on NVIDIA H200; the scenario says h100)" in table
    saved = json.loads(Path(files["analysis.json"]).read_text())["d4"]["sol"]
    assert saved["hardware"] == "h200" and saved["deployment"]["mla_form"] == "expanded"
