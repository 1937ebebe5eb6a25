"""The embedded engine's real CPU trace: module ranges and the hand-written signature agree.

Fixture: tests/data/embedded-cpu-demo-TP-0-DECODE.trace.json.gz (see tests/data/README.md), 3 decode
steps of the tiny-cpu preset: 4 layers, layer 0 dense, layers 1-3 MoE.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from analysis.attribute import RankOptions, attribute_rank
from analysis.signature import load_signature
from analysis.trace_loader import load_trace

TRACE = Path(__file__).parent / "data" / "embedded-cpu-demo-TP-0-DECODE.trace.json.gz"


@pytest.fixture(scope="module")
def attributed():
    trace = load_trace(str(TRACE))
    sig = load_signature("embedded-hf-deepseek-v3-cpu")
    return {mode: attribute_rank(trace, sig, None, RankOptions(attribution=mode)) for mode in ("template", "modules")}


def _by_module(rows) -> dict[tuple[str, str], float]:
    total: dict[tuple[str, str], float] = defaultdict(float)
    for r in rows:
        if r.section == "layer":
            total[(r.group, r.module)] += r.busy_us
    return total


def test_cpu_operators_keep_their_launcher() -> None:
    trace = load_trace(str(TRACE))
    assert {k.launcher for k in trace.kernels} == {"cpu"}


def test_three_steps_of_four_layers_by_both_sources(attributed) -> None:
    for mode, (rows, steps) in attributed.items():
        assert [s.layers_found for s in steps] == [4, 4, 4], mode
    layer_groups: dict[int, set[str]] = defaultdict(set)
    for r in attributed["modules"][0]:
        if r.section == "layer":
            layer_groups[r.layer].add(r.group)
    assert "mlp" in layer_groups[0] and "gate" not in layer_groups[0]
    for layer in (1, 2, 3):
        assert {"attention", "gate", "moe"} <= layer_groups[layer] and "mlp" not in layer_groups[layer]


def test_signature_agrees_with_module_ranges_on_the_big_modules(attributed) -> None:
    template = _by_module(attributed["template"][0])
    modules = _by_module(attributed["modules"][0])
    # Attention and routed experts hold most of the operator time; on CPU the two sources may only
    # disagree on zero-cost view/copy operators at module borders.
    for key in (("attention", "self_attn"), ("moe", "experts")):
        assert modules[key] > 0
        assert abs(template[key] - modules[key]) <= 0.02 * modules[key], (key, template[key], modules[key])
    layer_total = sum(modules.values())
    for key in set(template) | set(modules):
        assert abs(template.get(key, 0.0) - modules.get(key, 0.0)) <= 0.02 * layer_total, key
