"""Decode traces written by a real SGLang 0.5.17 server (tests/data/sglang-real, one H200, see
docs/gpu-runs.md): a DeepSeek-V3-architecture model whose layer counts come from the run's own
config.json. Checks the layer count (dense + MoE), that every kernel is attributed or in
`unattributed`, and the signatures' kernel names against what the real kernels are called.
The analysis faults these traces first showed (steps cut one replay late, MLA projections in the
previous layer, verify steps split in two, draft kernels dropped) are fixed and tested here."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from analysis.pipeline import AnalysisOptions, analyze
from analysis.attribution.signature import load_signature

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests/data/sglang-real"
CONFIG = json.loads((ROOT / "benchmarks/gpu/sglang_real/model/config.json").read_text())
LAYERS = CONFIG["num_hidden_layers"]
DENSE = CONFIG["first_k_dense_replace"]
MOE = LAYERS - DENSE
FUSED = DATA / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"
DEEPGEMM = DATA / "sglang-0.5.17-dsv3-4l-fp8-h200-deepgemm-moe-TP-0-DECODE.trace.json.gz"
MTP = DATA / "sglang-0.5.17-dsv3-4l-fp8-h200-mtp-TP-0-DECODE.trace.json.gz"
CAPTURE = DATA / "graph_capture_profile"
PROFILED_STEPS = 5  # /start_profile num_steps


def _gpu_activity(path: Path) -> int:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))


def _analyze(path: Path, signature: str, **kw):
    return analyze([str(path)], signature=signature, options=AnalysisOptions(layers=LAYERS, **kw))


def test_config_is_deepseek_v3_shaped():
    assert CONFIG["architectures"] == ["DeepseekV3ForCausalLM"]
    assert (LAYERS, DENSE, MOE) == (4, 1, 3)
    assert CONFIG["quantization_config"]["weight_block_size"] == [128, 128]


@pytest.mark.parametrize("path", [FUSED, DEEPGEMM], ids=["fused-moe", "deepgemm-moe"])
def test_layer_count_and_every_kernel_accounted(path):
    result = _analyze(path, "sglang-sm90-tp-fp8")
    assert len(result.kernel_rows) == _gpu_activity(path)  # nothing dropped
    ok = [s for s in result.step_rows if s.status == "ok"]
    assert len(ok) == PROFILED_STEPS
    for step in ok:
        assert step.layers_found == LAYERS
        rows = [r for r in result.kernel_rows if r.step == step.step]
        # dense + MoE as the config says: layer 0 runs the dense MLP, the others the experts
        assert {r.layer for r in rows if r.module == "dense_gate_up"} == set(range(DENSE))
        assert {r.layer for r in rows if r.module == "up_gate_gemm"} == set(range(DENSE, LAYERS))
        assert len(rows) == step.kernels
        assert all(r.source != "unattributed" or r.group == "unattributed" for r in rows)
        assert sum(r.busy_us for r in rows) == pytest.approx(step.busy_us, rel=1e-3)
        # inside the layers every kernel is named; leftovers are outside (side streams before layer 0)
        assert not [r.kernel_name for r in rows if r.section == "layer" and r.group == "unattributed"]
        assert {r.layer for r in rows if r.section == "layer"} == set(range(LAYERS))


def _modules(result, step) -> set[tuple[str, str, str]]:
    return {(r.group, r.module, r.kernel) for r in result.kernel_rows if r.step == step and r.section == "layer"}


@pytest.mark.parametrize("path", [FUSED, DEEPGEMM], ids=["fused-moe", "deepgemm-moe"])
def test_tp_signature_names_every_module(path):
    result = _analyze(path, "sglang-sm90-tp-fp8")
    step = next(s.step for s in result.step_rows if s.status == "ok")
    found = _modules(result, step)
    for key in [("attention", "q_a_kv_a", "deep_gemm"), ("attention", "q_proj_b", "deep_gemm"),
                ("attention", "attn_mqa", "flash_mla"), ("attention", "attn_mqa", "flash_mla_combine"),
                ("attention", "o_proj", "deep_gemm"), ("attention", "kv_a_layernorm", "RMSNormKernel"),
                ("gate", "router", "router_gemm"), ("gate", "topk", "deepseek_v3_topk"),
                ("moe", "up_gate_gemm", "grouped gemm"), ("moe", "down_gemm", "grouped gemm"),
                ("moe", "combine", "topk sum"), ("mlp", "dense_gate_up", "deep_gemm"),
                ("mlp", "dense_down", "deep_gemm")]:
        assert key in found, key


def test_signature_examples_are_real_kernel_names():
    """Every example of sglang-sm90-tp-fp8 that is a full name occurs in the bundled traces, and its entry matches it."""
    names = set()
    for path in (FUSED, DEEPGEMM, MTP):
        with gzip.open(path, "rt") as fh:
            names |= {e["name"] for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel"}
    sig = load_signature("sglang-sm90-tp-fp8")
    for entry in [*sig.layer, *sig.side, *sig.post]:
        if not entry.example or "..." in entry.example:
            continue
        assert entry.example in names, entry.example
        assert entry.matches(entry.example)


def test_deepep_ll_signature_matches_the_real_attention_and_gate_kernels():
    """sglang-sm90-deepep-ll on a stack without DeepEP: the attention part (shared by both stacks) is
    named entry by entry; the Triton experts, which it does not describe, stay unattributed."""
    result = _analyze(FUSED, "sglang-sm90-deepep-ll")
    ok = [s for s in result.step_rows if s.status == "ok"]
    assert ok and all(s.layers_found == LAYERS for s in ok)
    found = _modules(result, ok[0].step)
    for key in [("attention", "q_a_kv_a", "deep_gemm"), ("attention", "q_proj_b", "deep_gemm"),
                ("attention", "w_kc bmm", "nvjet"), ("attention", "rotary_emb", "rotary"),
                ("attention", "kv_cache_write", "cat / index_put"), ("attention", "attn_mqa", "flash_mla"),
                ("attention", "attn_mqa", "flash_mla_combine"), ("attention", "w_vc bmm", "nvjet"),
                ("attention", "o_proj", "deep_gemm"), ("mlp", "dense_gate_up", "deep_gemm"),
                ("mlp", "dense_down", "deep_gemm")]:
        assert key in found, key
    sig = load_signature("sglang-sm90-deepep-ll")
    router = next(e for e in sig.layer if e.module == "router")
    assert router.matches("void (anonymous namespace)::router_gemm_kernel<__nv_bfloat16, float, 128, 8, 16, 256, "
                          "7168, true>(float*, __nv_bfloat16 const*, __nv_bfloat16 const*)")
    masked = next(e for e in sig.layer if e.module == "up_gate_gemm")
    contiguous = ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 4096u, 7168u, 257u, 128u, 192u, "
                  "128u, 128u, 128u, 128u, 4u, 128u, 256u, 2u, false, 132u, (deep_gemm::GemmType)1, cutlass::bfloat16_t, "
                  "deep_gemm::epilogue::transform::EpilogueIdentity>")
    assert not masked.matches(contiguous)  # GemmType 1 (contiguous) is not the masked GEMM DeepEP LL feeds
    assert masked.matches(contiguous.replace("GemmType)1", "GemmType)2"))


def test_capture_trace_without_module_ranges_is_reported_not_used():
    """0.5.17's --enable-profile-cuda-graph capture trace has shapes but no stacks, so no layer ranges."""
    result = _analyze(DEEPGEMM, "sglang-sm90-tp-fp8", capture_traces=[str(CAPTURE)])
    messages = " ".join(p.message for p in result.problems)
    assert "no decoder-layer nn.Module ranges" in messages
    assert all(r.source != "capture" for r in result.kernel_rows)


def test_every_profiled_step_is_whole():
    """The eager Sampler module is no model forward, and CPU step annotations place each graph
    replay's kernels through their cudaGraphLaunch: five steps of four layers, nothing dropped."""
    result = _analyze(FUSED, "sglang-sm90-tp-fp8")
    assert [s.layers_found for s in result.step_rows] == [LAYERS] * PROFILED_STEPS
    assert {s.segmented_by for s in result.step_rows} == {"cpu_annotation"}


@pytest.mark.parametrize("path", [FUSED, DEEPGEMM, MTP], ids=["fused-moe", "deepgemm-moe", "mtp"])
def test_structural_attribution_without_a_signature(path):
    """No signature: layers by attention cores (FlashMLA; Triton extend attention in MTP verify),
    dense + MoE as the config says, and the seed's rows."""
    result = analyze([str(path)], options=AnalysisOptions(layers=LAYERS))
    main = [s for s in result.step_rows if s.stage in ("decode", "target_verify")]
    assert len(main) == PROFILED_STEPS
    assert all((s.layers_found, s.moe_layers_found, s.status) == (LAYERS, MOE, "ok") for s in main)
    rows = {(r.group, r.module) for r in result.d4.rows}
    assert {("attention", "q_a_kv_a"), ("attention", "q_proj_b"), ("attention", "w_kc bmm"),
            ("attention", "attn_core"), ("attention", "o_proj"), ("gate", "router"), ("gate", "topk"),
            ("moe", "up_gate_gemm"), ("moe", "down_gemm"), ("mlp", "gate_up_proj"), ("mlp", "down_proj")} <= rows
    assert len(result.kernel_rows) == _gpu_activity(path)


def test_mtp_verify_steps_hold_every_layer():
    """SGLang writes step[TARGET_VERIFY ...] on the main and the alternate stream (one step), and its
    draft passes as `draft` / `draft_extend` ranges: verify steps hold every layer, the draft extend
    runs the model's one MTP layer, and every kernel belongs to a step."""
    result = _analyze(MTP, "sglang-sm90-tp-fp8")
    verify = [s for s in result.step_rows if s.stage == "target_verify"]
    assert len(verify) == PROFILED_STEPS and all(s.layers_found == LAYERS for s in verify)
    extend = [s for s in result.step_rows if s.stage == "draft_extend"]
    assert len(extend) == PROFILED_STEPS
    assert len(result.kernel_rows) == _gpu_activity(MTP)
    assert any(r.group == "mtp" and r.module == "draft extend" for r in result.d4.mtp_rows)


# Eager decode (--disable-cuda-graph) with stacks from the same server: SGLang's own nn.Module ranges,
# read by the independent truth (tests/accuracy/truth.py, no analysis code), are what the shipped
# signature and the structure are held against.
EAGER = sorted((DATA / "eager").glob("*-decode.trace.json.gz"))


@pytest.mark.parametrize("path", EAGER, ids=[p.name.split("-eager-")[1].split("-TP-")[0] for p in EAGER])
@pytest.mark.parametrize("signature", ["sglang-sm90-tp-fp8", "generic"])
def test_sglangs_own_module_ranges_agree_with_the_signature_and_the_structure(path, signature):
    """By the truth: every layer of every forward (MTP: the target's 4, then NextN's 1) and every
    group within 3 points, ranges stripped; and calibration against the trace keeps the signature."""
    from accuracy.tool import found_of
    from accuracy.truth import compare, truth_of
    from analysis.attribution.rank.calibration import calibrate

    truth, found = truth_of(str(path)), found_of(str(path), signature)
    per_step = [LAYERS, 1] if "-mtp-" in path.name else [LAYERS]  # MTP: the target's forward, then NextN's
    assert truth.layers == per_step * (len(truth.layers) // len(per_step)) and len(truth.layers) >= 3
    assert [n for n in found.layers if n] == truth.layers
    assert not compare(truth.group_shares(), truth.row_shares(), found.groups, found.rows, rows=[])
    cal = calibrate(signature, truth_trace=str(path))
    assert cal.chosen == signature and cal.candidates[0].agrees, cal.reason


def test_an_eager_mtp_trace_cuts_the_target_and_the_draft_forward_apart():
    """The target model's and the NextN model's forwards are both model calls: one step each, staged
    as SGLang annotated them, as the graph replays of the same server are cut."""
    path = next(p for p in EAGER if "-mtp-" in p.name)
    steps = analyze([str(path)]).step_rows
    assert [(s.stage, s.layers_found, s.moe_layers_found) for s in steps] == [
        ("target_verify", LAYERS, MOE), ("draft_extend", 1, 1)] * 4
    assert {s.segmented_by for s in steps} == {"module_range"}
