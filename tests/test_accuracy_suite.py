"""Attribution that generalises: every eager trace with module ranges, analysed without them.

Each trace is analysed with its nn.Module ranges stripped (as a CUDA-graph replay shows it) and
with no signature at all (the structural attribution learns nothing from any trace, so no trace
is judged by something learned from it), then compared with its own ranges (a graph replay: with
its eager twin's). Done when steps and layers (dense + MoE) are right and every D4 group's share
of step busy time is within 3 percentage points. docs/accuracy.md holds the full table
(benchmarks/accuracy/report.py).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.attribution.agreement import GROUPS, compare_with_ranges
from benchmarks.accuracy.suite_cases import bundled_cases, corpus_cases, public_cases
from conftest import REAL, real_trace

MAX_GROUP_GAP_PP = 3.0
CASES = corpus_cases() + bundled_cases()


def _check(case, result):
    assert result.found.steps == case.steps, f"steps: found {result.found.steps}, truth {case.steps}"
    assert result.found.layers == [case.layers] * case.steps, result.found.layers
    assert result.found.moe_layers == [case.moe_layers] * case.steps, result.found.moe_layers
    gaps = {g: round(result.group_gap_pp(g), 2) for g in GROUPS}
    assert all(abs(v) <= MAX_GROUP_GAP_PP for v in gaps.values()), gaps


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_without_ranges_matches_the_ranges(case):
    result = compare_with_ranges(str(case.path), str(case.truth) if case.truth else None)
    if case.truth is None:  # the truth itself has the manifest's shape
        assert result.truth.steps == case.steps and result.truth.layers == [case.layers] * case.steps
        assert result.truth.moe_layers == [case.moe_layers] * case.steps
    _check(case, result)


PUBLIC = public_cases(Path(REAL))


@pytest.mark.parametrize("case", PUBLIC, ids=[c.name for c in PUBLIC])
def test_public_eager_traces_without_ranges_match_their_ranges(case):
    path = real_trace(str(case.path.relative_to(REAL)))
    result = compare_with_ranges(path)
    assert result.truth.layers == [case.layers] and result.truth.moe_layers == [case.moe_layers]
    _check(case, result)


def test_a_trace_without_ranges_cannot_be_its_own_truth():
    from analysis.errors import AnalysisError

    graph = next(c for c in CASES if c.truth is not None)
    with pytest.raises(AnalysisError, match="no nn.Module ranges"):
        compare_with_ranges(str(graph.path))


def test_the_seed_rows_appear_for_an_eager_deepseek_trace():
    """The D4 table of an eager DeepseekV3 trace has the seed's sub-module rows, with and without ranges."""
    from analysis.api import AnalysisOptions, analyze

    path = next(c.path for c in CASES if c.name.startswith("dsv3wide-h200-l4d1-e64k8-bs8-grouped"))
    for mode in ("auto", "template"):
        rows = {(r.group, r.module) for r in analyze([str(path)], options=AnalysisOptions(attribution=mode)).d4.rows}
        expected = {("attention", "input_layernorm"), ("attention", "q_a_proj"), ("attention", "q_proj_b"),
                    ("attention", "kv_a_proj"), ("attention", "kv_b_proj"), ("attention", "attn_core"),
                    ("attention", "o_proj"), ("gate", "post_attention_layernorm"), ("gate", "router"),
                    ("gate", "topk"), ("moe", "up_gate_gemm"), ("moe", "silu"), ("moe", "down_gemm"),
                    ("combine/share overlap", "shared_experts"), ("mlp", "gate_up_proj"), ("mlp", "down_proj")}
        assert expected <= rows, (mode, expected - rows)
    # with ranges, the rotary embedding is named by its python function
    rows = {(r.group, r.module) for r in analyze([str(path)]).d4.rows}
    assert ("attention", "rotary_emb") in rows


# The attribute names a module's role must carry (the last part of its qualified name), per role.
ATTRIBUTE_OF_ROLE = {
    "input_layernorm": {"input_layernorm"}, "post_attention_layernorm": {"post_attention_layernorm"},
    "q_a_proj": {"q_a_proj"}, "q_a_layernorm": {"q_a_layernorm"}, "q_b_proj": {"q_b_proj"},
    "kv_a_proj": {"kv_a_proj_with_mqa"}, "kv_a_layernorm": {"kv_a_layernorm"}, "kv_b_proj": {"kv_b_proj"},
    "qkv_proj": {"q_proj", "k_proj", "v_proj", "qkv_proj"}, "qk_norm": {"q_norm", "k_norm"},
    "o_proj": {"o_proj"}, "router": {"gate", "router"}, "gate_up_proj": {"gate_proj", "up_proj"},
    "down_proj": {"down_proj"},
}


@pytest.mark.parametrize("case", [c for c in CASES if c.truth is None and c.origin == "corpus"],
                         ids=[c.name for c in CASES if c.truth is None and c.origin == "corpus"])
def test_the_standard_map_names_modules_as_their_attributes(case):
    """The ground truth itself: the profiler names calls by class (Linear_3), the standard map names
    them by position (the 4th linear before the attention core is kv_b_proj). Each corpus trace's
    meta file recorded the real attribute names (model.layers.0.self_attn.kv_b_proj): every kernel
    launched by a module the map gives one of these roles must come from a module of that name."""
    import json

    from analysis.attribution.module_roles import ModuleRoleNamer, RangeForest, launch_points, roles_from_ranges, standard_map
    from analysis.attribution.steps import segment_steps
    from analysis.ingest.trace_loader import load_trace

    meta = json.loads(case.meta.read_text())
    names = meta["module_names"]
    trace = load_trace(str(case.path))
    forest = RangeForest(trace.module_ranges, trace.function_ranges, standard_map())
    namer = ModuleRoleNamer(forest)
    launches = trace.launch_by_correlation()
    checked = 0
    for step in segment_steps(trace):
        points = launch_points(step.kernels, launches)
        _layers, roles = roles_from_ranges(step.kernels, points, namer)
        for point, role in zip(points, roles):
            if role not in ATTRIBUTE_OF_ROLE or point is None:
                continue
            node = forest.innermost(*point)
            modules = [n for n in forest.path(node) if forest.nodes[n].function_role is None]
            qualified = next((names[forest.nodes[n].rng.name] for n in modules
                              if names.get(forest.nodes[n].rng.name, "").rsplit(".", 1)[-1]
                              in set().union(*ATTRIBUTE_OF_ROLE.values())), None)
            if qualified is None:
                continue  # launched by the role's module itself (a direct op), not a named child
            assert qualified.rsplit(".", 1)[-1] in ATTRIBUTE_OF_ROLE[role], (role, qualified)
            checked += 1
    assert checked > 0
