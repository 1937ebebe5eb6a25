"""The accuracy comparator fails for the errors a shared truth could not see.

Why: the suite's former truth (the analysis' own modules mode) moved with the analysis: with the
routed experts' up/gate and down GEMMs swapped, or their other kernels named topk, every accuracy
test still passed. Here the analysis' output rows of real traces are broken on purpose, one blind
spot each, and the comparison with the independent truth (tests/accuracy/truth.py) must fail,
naming the rows; unbroken, the same traces pass.
"""
from __future__ import annotations

import msgspec
import pytest

from accuracy.judge import module_names
from accuracy.tool import found_of
from accuracy.truth import compare, truth_of
from analysis.attribution.rank.agreement import shares
from benchmarks.accuracy.suite_cases import bundled_cases, corpus_cases

NAMES = ("dsv3wide-h200-l4d1-e64k8-bs8-grouped-sdpa", "sglang-0.5.17-eager-deepgemm-moe",
         "qwen3moe-cpu-l4d0-e16k4-bs4-grouped-sdpa")
CASES = [c for c in corpus_cases() + bundled_cases() if c.name in NAMES]


def _swap_up_down(r):
    swapped = {"up_gate_gemm": "down_gemm", "down_gemm": "up_gate_gemm"}.get(r.module)
    return msgspec.structs.replace(r, module=swapped) if swapped else r


def _experts_rest_as_topk(r):
    if r.group == "moe" and r.module in ("experts", "silu"):
        return msgspec.structs.replace(r, group="gate", module="topk")
    return r


def _topk_under_attention(r):
    return msgspec.structs.replace(r, group="attention") if r.module == "topk" else r


MUTATIONS = {  # mutation -> the rows its failure must name
    "routed up/down swapped": (_swap_up_down, ("row up_gate", "row down")),
    "experts' non-GEMM kernels named topk": (_experts_rest_as_topk, ("row topk",)),
    "topk filed under attention": (_topk_under_attention, ("row topk",)),
}


@pytest.fixture(scope="module", params=CASES, ids=[c.name for c in CASES])
def judged(request):
    case = request.param
    truth = truth_of(str(case.path), module_names(case.meta))
    return truth.group_shares(), truth.row_shares(), found_of(str(case.path))


def test_unbroken_the_analysis_agrees_with_the_truth(judged):
    truth_groups, truth_rows, found = judged
    assert compare(truth_groups, truth_rows, found.groups, found.rows) == []


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_each_blind_spot_fails_the_comparison(judged, mutation):
    truth_groups, truth_rows, found = judged
    mutate, named = MUTATIONS[mutation]
    rows = [mutate(r) for r in found.kernel_rows]
    assert rows != found.kernel_rows, "the mutation changed nothing: no such rows in this trace"
    broken = shares(rows, found.step_rows)
    problems = compare(truth_groups, truth_rows, broken.groups, broken.modules)
    assert problems, f"{mutation}: the comparator did not notice"
    for row in named:
        assert any(p.startswith(row) for p in problems), (row, problems)
