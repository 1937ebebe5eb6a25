"""CUDA-graph replays whose layers hop streams: every layer found across streams in time order, and
the shared experts are the side branch of each MoE layer's fork, not everything off the busiest
stream.

The SYNTHETIC fixture (tests/synthetic_multistream.py) knows every kernel's layer and row; the
recorded one (tests/data/accuracy/h100: a DeepSeek-V3-shaped expert-parallel decode on one H100,
shared experts on a side stream, as a graph replay and eagerly with module ranges) is held against
its eager twin's ranges as the independent truth reads them (tests/accuracy/truth.py, which imports
nothing from `analysis`).
"""
from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from accuracy.judge import judge
from accuracy.table import GROUPS
from accuracy.truth import compare
from analysis.pipeline import AnalysisOptions, analyze
from analysis.attribution.chain import main_chain
from harness.cli import main
from synthetic_multistream import DURATIONS_US, STREAM_A, STREAM_B, write_trace

ACCURACY = Path(__file__).resolve().parent / "data" / "accuracy" / "h100"
GRAPH = ACCURACY / "dsv3ep-h100x1-e64k8-sidestream-bs8-graph-TP-0-EP-0-DECODE.trace.json.gz"
EAGER = ACCURACY / "dsv3ep-h100x1-e64k8-sidestream-bs8-eager-TP-0-EP-0-DECODE.trace.json.gz"


def _assert_every_kernel_matches(result, truth):
    found = Counter((r.kernel_name, r.layer, r.group, r.module) for r in result.kernel_rows)
    expected = Counter((name, layer, group, module) for step in truth.kernels for name, _s, layer, group, module in step)
    assert found == expected, (found - expected, expected - found)
    shared = sum(r.busy_us for r in result.kernel_rows if r.module == "shared_experts")
    assert shared == pytest.approx(truth.busy_us(DURATIONS_US, module="shared_experts"))
    assert not result.failed_checks, result.failed_checks


@pytest.mark.parametrize("hop_at", [1, 2, 3])
def test_every_kernel_of_a_synthetic_stream_hopping_replay_gets_its_layer_and_row(tmp_path, hop_at):
    path = tmp_path / f"hop{hop_at}-TP-0-DECODE.trace.json.gz"
    truth = write_trace(path, steps=2, layers=4, dense=1, hop_at=hop_at)
    result = analyze([str(path)], options=AnalysisOptions(layers=4))
    assert [(s.layers_found, s.moe_layers_found, s.status) for s in result.step_rows] == [(4, 3, "ok")] * 2
    # the busiest stream alone gets these wrong: the attention cores run on both streams, or (the
    # last layer hopping) the last routed experts run off it
    assert {r.stream for r in result.kernel_rows if r.module == "attn_core"} == (
        {STREAM_A, STREAM_B} if hop_at < 3 else {STREAM_A})
    _assert_every_kernel_matches(result, truth)


MANY_STREAMS = tuple(range(3, 18))  # 15 streams, as a graph with a branch stream per fork runs them


@pytest.mark.parametrize("variant", [
    # after the join the graph carries on on the shared experts' stream
    dict(carry_on="shared"),
    dict(carry_on="shared", hop_at=2),
    # every MoE layer's routed branch on a stream of its own, 15 streams in all
    dict(streams=MANY_STREAMS),
    dict(streams=MANY_STREAMS, carry_on="shared", layers=6),
    # the routed branch starts late: the shared experts' first kernels overlap nothing
    dict(routed_delay_us=12.0),
    dict(routed_delay_us=12.0, carry_on="shared"),
    # the shared experts start late and outlast the routed branch: timing alone would take the
    # shared stream for the chain and lose the combine (to `other`, with no check firing)
    dict(shared_delay_us=150.0),
    dict(shared_delay_us=150.0, carry_on="shared", streams=MANY_STREAMS),
    # a collective on a stream of its own runs beside all the layers: one overlap from the first
    # layer to the last, which the chain reads again without that stream
    dict(spanning=True),
    dict(spanning=True, streams=MANY_STREAMS, carry_on="shared"),
], ids=lambda v: "-".join(f"{k}={len(x) if isinstance(x, tuple) else x}" for k, x in v.items()))
def test_synthetic_multi_stream_variants_get_every_kernel_right(tmp_path, variant):
    settings = {"steps": 2, "layers": 4, "dense": 1, "hop_at": 1, **variant}
    path = tmp_path / "variant-TP-0-DECODE.trace.json.gz"
    truth = write_trace(path, **settings)
    streams = {s for step in truth.kernels for _n, s, *_ in step}
    pool = settings.get("streams", (STREAM_A, STREAM_B))
    moe_layers = settings["layers"] - settings["dense"]
    # the first stream, then one per MoE layer's branch (and the spanning collective's)
    assert len(streams) == min(len(pool), 1 + moe_layers) + settings.get("spanning", False)
    result = analyze([str(path)], options=AnalysisOptions(layers=settings["layers"]))
    assert [(s.layers_found, s.moe_layers_found, s.status) for s in result.step_rows] == (
        [(settings["layers"], settings["layers"] - 1, "ok")] * 2)
    _assert_every_kernel_matches(result, truth)


def test_the_chain_follows_the_branch_that_carries_on():
    # stream 1 runs a, then forks: 2 runs b (long) while 1 runs s (short); the chain goes on with c on 2
    starts = [0.0, 10.0, 11.0, 100.0]
    ends = [9.0, 90.0, 20.0, 110.0]
    streams = [1, 2, 1, 2]
    assert main_chain(starts, ends, streams) == [0, 1, 3]
    # without overlap every kernel is on the chain, whatever its stream
    assert main_chain([0.0, 10.0, 20.0], [9.0, 19.0, 29.0], [1, 2, 1]) == [0, 1, 2]


def test_at_a_fork_the_branch_running_the_layers_own_kernels_is_the_chain():
    # stream 1 forks: 2 runs the routed experts' tail (anchors), 1 a late shared expert that outlasts
    # it and carries on; timing alone takes stream 1, the anchors take stream 2
    starts = [0.0, 10.0, 12.0, 20.0, 60.0]
    ends = [9.0, 30.0, 50.0, 40.0, 70.0]
    streams = [1, 2, 1, 2, 1]
    assert main_chain(starts, ends, streams) == [0, 2, 4]
    assert main_chain(starts, ends, streams, [False, True, False, True, False]) == [0, 1, 3, 4]
    # a tie in anchors leaves it to timing
    assert main_chain(starts, ends, streams, [False, True, True, False, False]) == [0, 2, 4]
    # both branches run anchors: the one running more of them is the chain
    assert main_chain(starts, ends, streams, [False, True, True, True, False]) == [0, 1, 3, 4]


def test_a_side_trip_without_the_layers_own_kernels_leaves_the_chain():
    """SYNTHETIC (answers by hand): stream 2 runs no anchor in the whole step; its kernels 1 and 3 overlap
    nothing, so timing alone puts them on the chain between stream 1's kernels; they are side work. A
    stream that runs anchors somewhere (a graph replay's layers hopping there) keeps its trips."""
    starts = [0.0, 10.0, 20.0, 30.0, 40.0]
    ends = [9.0, 19.0, 29.0, 39.0, 49.0]
    assert main_chain(starts, ends, [1, 2, 1, 2, 1], [True, False, False, False, True]) == [0, 2, 4]
    assert main_chain(starts, ends, [1, 2, 1, 2, 1], [True, False, False, True, True]) == [0, 1, 2, 3, 4]


def test_the_recorded_side_stream_replay_matches_its_eager_twin_within_3_points():
    """The replay's layers, groups and expert rows against its eager twin's ranges, read by the
    independent truth and carried onto the replay's own kernels (tests/accuracy/truth.transfer)."""
    result = analyze([str(GRAPH)], options=AnalysisOptions(layers=4))
    assert [(s.layers_found, s.moe_layers_found, s.status) for s in result.step_rows] == [(4, 3, "ok")] * 3
    assert not result.failed_checks, result.failed_checks
    j = judge(str(GRAPH), str(EAGER))
    assert (j.truth_layers, j.truth_moe_layers) == ([4, 4, 4], [3, 3, 3]) and j.unnamed_pct < 0.5
    assert j.found_layers == [4, 4, 4] and j.found_moe_layers == [3, 3, 3]
    gaps = {g: round(j.found_groups.get(g, 0.0) - j.truth_groups.get(g, 0.0), 2) for g in GROUPS}
    assert all(abs(v) <= 3.0 for v in gaps.values()), gaps
    # the routed experts are the moe group, not shared_experts (the fault this replay once showed):
    # the routed GEMMs, the activation and the shared experts each within their row bound of the truth
    assert not compare(j.truth_groups, j.truth_rows, j.found_groups, j.found_rows,
                       rows=["up_gate", "act", "down", "shared experts"])
    moe = sum(r.busy_us for r in result.kernel_rows if r.group == "moe")
    shared = sum(r.busy_us for r in result.kernel_rows if r.module == "shared_experts")
    assert moe > 10 * shared


def test_the_recorded_side_stream_replay_passes_strict_with_its_model_file(tmp_path):
    # deepseek-v3-wide4: the same widths and 1 dense + 3 MoE layers (128 experts there, 64 here:
    # the layer count and experts per token against shared experts are what the checks read)
    out = tmp_path / "out"
    assert main(["analyze", str(GRAPH), "--model", "deepseek-v3-wide4", "--strict", "--out", str(out)]) == 0
    with (out / "checks.csv").open() as fh:
        checks = {row["check"]: row for row in csv.DictReader(fh)}
    # every check passes; profiler_overhead needs the run's load records, which a bare trace has not
    assert {c: row["verdict"] for c, row in checks.items()} == dict.fromkeys(checks, "pass") | {"profiler_overhead": "n/a"}
    assert checks["layer_count"]["expected"] == "4 (model deepseek-v3-wide4)"
    assert checks["routed_vs_shared_experts"]["expected"].startswith("ratio >= 1 ")
    assert "4 layers in 3 step(s)" == checks["layer_count"]["value"]
