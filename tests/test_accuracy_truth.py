"""The accuracy truth (tests/accuracy/truth.py) stands apart from what it judges, and is right on a
trace whose answer is known.

Why: a truth that imports the analysis moves with it, and an error both share reads as agreement
(the suite's former truth, the analysis' own modules mode, passed with routed up/down swapped).
"""
from __future__ import annotations

import ast
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from accuracy.judge import module_names
from accuracy.truth import truth_of
from benchmarks.accuracy.suite_cases import corpus_cases

TRUTH_PACKAGE = Path(__file__).parent / "accuracy"
# the truth's own files; tool.py and judge.py run the analysis and are not part of the truth
TRUTH_FILES = ("__init__.py", "truth.py", "table.py")
FORBIDDEN = {"analysis", "harness", "benchmarks", "msgspec", "yaml"}


def forbidden_imports(source: str) -> list[str]:
    """Top-level packages outside the standard library and the truth itself that `source` imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        else:
            continue
        found += [n for n in names if n.split(".")[0] in FORBIDDEN]
    return found


def test_the_import_check_can_fail():
    assert forbidden_imports("from analysis.attribution import structure\nimport json") == ["analysis.attribution"]
    assert forbidden_imports("import harness.cli as c") == ["harness.cli"]
    assert forbidden_imports("from . import table\nimport re") == []


def test_the_truth_imports_nothing_from_the_analysis():
    own = {p.name for p in TRUTH_PACKAGE.glob("*.py")}
    for name in TRUTH_FILES:
        source = (TRUTH_PACKAGE / name).read_text()
        assert not forbidden_imports(source), (name, forbidden_imports(source))
        for node in ast.walk(ast.parse(source)):  # its relative imports stay among the truth's own files
            if isinstance(node, ast.ImportFrom) and node.level:
                targets = [node.module] if node.module else [a.name for a in node.names]
                assert all(f"{t}.py" in TRUTH_FILES for t in targets), (name, targets, own)


def test_importing_the_truth_loads_no_analysis_module():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import accuracy.truth; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[2:])))")
    out = subprocess.run([sys.executable, "-c", code, str(TRUTH_PACKAGE.parent), *sorted(FORBIDDEN)],
                         capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]", out.stdout


def _synthetic_trace(path: Path) -> None:
    """A hand-written GPU trace with known answers: one forward of one MoE layer, kernels of known
    durations launched inside known module ranges, one under a `group.module` annotation (synthetic:
    it tests the truth's placement and arithmetic, not any real stack)."""
    events, t = [], 1000.0

    def rng(name, start, end):
        events.append({"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1, "ts": start,
                       "dur": end - start})

    def kernel(name, at, dur_us, corr):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": at,
                       "dur": 1, "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": at + 50, "dur": dur_us,
                       "args": {"correlation": corr, "stream": 7}})

    rng("nn.Module: ToyForCausalLM_0", t, t + 1000)
    kernel("embedding_kernel", t + 10, 5, 1)  # outside: 5
    rng("nn.Module: ToyDecoderLayer_0", t + 100, t + 900)
    rng("nn.Module: ToyRMSNorm_0", t + 110, t + 120)
    kernel("rmsnorm", t + 111, 10, 2)  # input_layernorm: 10
    rng("nn.Module: ToyAttention_0", t + 130, t + 400)
    rng("nn.Module: Linear_0", t + 140, t + 150)
    kernel("nvjet_qkv", t + 141, 20, 3)  # qkv_proj: 20
    rng("x.py(1): sdpa_attention_forward", t + 160, t + 200)
    kernel("flash_fwd", t + 161, 30, 4)  # attn_core: 30
    rng("nn.Module: Linear_1", t + 300, t + 310)
    kernel("nvjet_o", t + 301, 15, 5)  # o_proj: 15
    rng("nn.Module: ToyRMSNorm_1", t + 410, t + 420)
    kernel("rmsnorm", t + 411, 10, 6)  # post_attention_layernorm (MoE layer: gate): 10
    rng("nn.Module: ToyMoE_0", t + 430, t + 890)
    rng("nn.Module: ToyTopkRouter_0", t + 440, t + 460)
    kernel("nvjet_router", t + 441, 4, 7)  # router: 4
    kernel("topk_kernel", t + 445, 6, 8)  # topk: 6
    rng("nn.Module: ToyExperts_0", t + 500, t + 800)
    kernel("cutlass_grouped_gemm", t + 510, 40, 9)  # up_gate: 40
    rng("nn.Module: SiLUActivation_0", t + 520, t + 530)
    kernel("silu_kernel", t + 521, 8, 10)  # silu: 8
    kernel("cutlass_grouped_gemm", t + 540, 30, 11)  # down: 30
    events.append({"ph": "X", "cat": "user_annotation", "name": "moe.expert_scatter", "pid": 1, "tid": 1,
                   "ts": t + 549, "dur": 3})  # the user's own row for what it wraps
    kernel("index_add", t + 550, 7, 12)  # moe/expert_scatter (annotated): 7
    rng("nn.Module: ToyMLP_0", t + 810, t + 880)
    kernel("nvjet_shared", t + 811, 12, 13)  # shared_experts: 12
    kernel("add_kernel", t + 895, 3, 14)  # the layer's own residual add: 3
    kernel("lm_head", t + 950, 30, 15)  # outside: 30
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)


def test_the_truth_is_right_on_a_trace_with_known_answers(tmp_path):
    path = tmp_path / "toy.trace.json.gz"
    _synthetic_trace(path)
    t = truth_of(str(path))
    assert (t.steps, t.layers, t.moe_layers) == (1, [1], [1])
    busy = 5 + 10 + 20 + 30 + 15 + 10 + 4 + 6 + 40 + 8 + 30 + 7 + 12 + 3 + 30
    expected_us = {("outside", "outside"): 35, ("attention", "input_layernorm"): 10, ("attention", "qkv_proj"): 20,
                   ("attention", "attn_core"): 30, ("attention", "o_proj"): 15, ("gate", "post_attention_layernorm"): 10,
                   ("gate", "router"): 4, ("gate", "topk"): 6, ("moe", "up_gate_gemm"): 40, ("moe", "silu"): 8,
                   ("moe", "down_gemm"): 30, ("moe", "expert_scatter"): 7,
                   ("combine/share overlap", "shared_experts"): 12, ("other", "residual_add"): 3}
    assert t.row_shares() == pytest.approx({k: 100 * v / busy for k, v in expected_us.items()})


NAMED = [c for c in corpus_cases() if c.truth is None and module_names(c.meta)]


@pytest.mark.parametrize("case", NAMED[::3], ids=[c.name for c in NAMED[::3]])
def test_class_and_position_name_what_the_recorded_attribute_names_name(case):
    """Where no qualified names were recorded (SGLang, the bundled traces) the truth names modules
    by class and position; on the corpus, where they were, both readings give the same rows."""
    by_name = truth_of(str(case.path), module_names(case.meta)).row_shares()
    by_position = truth_of(str(case.path)).row_shares()
    assert by_position == pytest.approx(by_name, abs=1e-9)
