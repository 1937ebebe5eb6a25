"""Self-checks on the real expert-parallel recordings (tests/data/sglang-real/ep, four H100s): none
fires on their right tables, and a wrong table says what is wrong.

The wrong tables start from the right analysis of a real DeepEP graph decode and move rows the way a
misplaced layer border does (the final norm, LM head and sampling counted in the last layer; the
first kernels of a layer counted in the one before): the checks must fail naming the kernels.
"""
from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from analysis.pipeline import AnalysisOptions, analyze
from analysis.attribution.rows import SECTION_LAYER, SECTION_POST
from analysis.tables.self_checks import FAIL, PASS, run_checks

EP = Path(__file__).resolve().parent / "data" / "sglang-real" / "ep"
CONFIGS = sorted({p.name.split("-TP-")[0] for p in EP.glob("*.trace.json.gz")})


def _files(config: str) -> list[str]:
    return sorted(str(p) for p in EP.glob(f"{config}-TP-*.trace.json.gz"))


@pytest.mark.parametrize("config", CONFIGS)
def test_no_check_fires_on_the_real_expert_parallel_tables(config):
    result = analyze(_files(config), options=AnalysisOptions(run="ep", layers=4))
    assert [(c.check, c.value, c.why) for c in result.failed_checks] == []
    assert {c.check for c in result.checks} >= {"layer_kernel_sequence", "layer_time", "after_layers"}


@pytest.fixture(scope="module")
def graph():
    return analyze(_files("sglang-0.5.17-dsv3-4l-fp8-h100x2-deepep-ll-graph"), options=AnalysisOptions(run="ep", layers=4))


def _checks(result, rows):
    return {c.check: c for c in run_checks(rows, result.step_rows, result.d4, None, 4)}


def test_the_tail_counted_in_the_last_layer_is_named(graph):
    last = max(r.layer for r in graph.kernel_rows if r.section == SECTION_LAYER)
    moved = [msgspec.structs.replace(r, section=SECTION_LAYER, layer=last) if r.section == SECTION_POST else r
             for r in graph.kernel_rows]
    checks = _checks(graph, moved)
    assert checks["after_layers"].verdict == FAIL
    assert "nvjet_sm90_tst_512x16" in checks["after_layers"].why  # the LM head GEMM, by name
    assert "the LM head" in checks["after_layers"].why
    assert checks["layer_time"].verdict == FAIL
    assert f"layer {last}" in checks["layer_time"].why and "nvjet_sm90_tst_512x16" in checks["layer_time"].why
    assert "LM head counted in the last layer?" in checks["layer_time"].why
    assert _checks(graph, graph.kernel_rows)["after_layers"].verdict == PASS


def test_a_layers_first_kernels_counted_in_the_layer_before_are_named(graph):
    """Layer 3's input norm, gather and q_a/kv_a GEMM in layer 2, as the cut before the fix put them."""
    firsts = {}
    for r in sorted(graph.kernel_rows, key=lambda r: (r.rank, r.step, r.start_us)):
        if r.section == SECTION_LAYER and r.layer == 3 and r.module in ("input_layernorm", "all_gather", "q_a_kv_a"):
            firsts.setdefault((r.rank, r.step), []).append(r)
    moved_ids = {id(r) for rows in firsts.values() for r in rows}
    assert moved_ids
    moved = [msgspec.structs.replace(r, layer=2) if id(r) in moved_ids else r for r in graph.kernel_rows]
    check = _checks(graph, moved)["layer_kernel_sequence"]
    assert check.verdict == FAIL
    assert "layer 3" in check.why and "named attention" in check.why  # the kernel at the first difference, with its row
