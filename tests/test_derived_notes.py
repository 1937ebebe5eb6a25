"""Notes where a derived figure cannot be right (analysis/tables/derived_notes.py), on real recordings.

The bundled DeepEP graph decode ran on dummy weights whose gate sends every token to the same experts:
with SOL settings its routed experts read 749% / 586% of SOL, which must be said with the cause; the
two-node job's recorded expert load (the same gate, 32x) must be flagged degenerate, and the loads
recorded with SGLang's uniform fake routing (tests/data/sglang-real/tbo*) must not be.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.ingest.expert_load import load_expert_load
from analysis.pipeline import AnalysisOptions, analyze
from analysis.sol.estimate import Deployment, SolSettings
from analysis.tables.d4 import render_markdown
from analysis.tables.derived_notes import degenerate_layers, uniform_busiest_ratio

DATA = Path(__file__).resolve().parent / "data" / "sglang-real"
GRAPH = sorted(str(p) for p in (DATA / "ep").glob("*-deepep-ll-graph-TP-*.trace.json.gz"))
DUMMY_LOAD = DATA / "ray-run" / "sglang_dsv3_4l_2x2_deepep-20261126-124934" / "expert_load" / "expert_load.json"
FAKE_LOADS = sorted((DATA / "tbo").glob("*.expert_load.json")) + sorted((DATA / "tbo61").glob("*.expert_load.json"))


def _table(**options) -> str:
    result = analyze(GRAPH, options=AnalysisOptions(run="ep", **options))
    return render_markdown([result.d4])


def test_routed_experts_above_sol_name_the_routing_as_the_likely_cause():
    sol = SolSettings("h800", Deployment(batch_per_rank=16, kv_len=1024, tp=2, ep=2))
    text = _table(sol=sol)
    line = next(line for line in text.splitlines() if "ABOVE SOL" in line and "up_gate_gemm" in line)
    assert "moe / down_gemm" in line and "uniform routing would touch" in line and "dummy" in line
    assert "attention / o_proj" not in line  # tp 2 given: o_proj's weights are split as they ran


def test_other_rows_above_sol_name_the_settings():
    text = _table(sol=SolSettings("h800", Deployment(batch_per_rank=16, kv_len=1024, tp=1, ep=2)))
    line = next(line for line in text.splitlines() if "ABOVE SOL" in line and "o_proj" in line)
    assert "--tp" in line and "tp 1" in line


def test_no_note_without_sol_or_below_it():
    assert "ABOVE SOL" not in _table()


def test_a_degenerate_expert_load_is_flagged_beside_the_table():
    text = _table(expert_load=str(DUMMY_LOAD))
    line = next(line for line in text.splitlines() if "EXPERT LOAD DEGENERATE" in line)
    assert "3 of 3 MoE layers" in line and "32.0x" in line


@pytest.mark.parametrize("path", FAKE_LOADS, ids=lambda p: p.name[30:80])
def test_loads_spread_like_uniform_routing_are_not(path):
    bad, total, _median = degenerate_layers(load_expert_load(path))
    assert total and bad == 0


def test_the_uniform_estimate_is_what_uniform_routing_gives():
    """Against a simulation with known answers (seeded multinomial draws), not against the formula's own
    arithmetic: the busiest of E experts over the mean, for few and for many tokens per expert."""
    import random

    rng = random.Random(7)
    for experts, picks in ((256, 128 * 9), (64, 32 * 8 * 14)):
        ratios = []
        for _ in range(200):
            counts = [0] * experts
            for _ in range(picks):
                counts[rng.randrange(experts)] += 1
            ratios.append(max(counts) * experts / picks)
        ratios.sort()
        estimate = uniform_busiest_ratio(experts, picks / experts)
        assert ratios[len(ratios) // 2] <= estimate * 1.15 and ratios[-1] < 2.0 * estimate
