"""Two-batch overlap (TBO) read without a flag (analysis/attribution/two_batch.py), on real SGLang 0.5.17
decodes recorded for it (tests/data/sglang-real/tbo and tbo61: DeepEP low-latency, two-batch overlap,
CUDA graphs and eager, DP attention, MTP, a 61-layer model on four H100s; docs/gpu-runs.md 2026-11-28).

What is held here comes from SGLang's schedule, not from the code under test: the model's layer count
(the config the server ran), two micro-batches in every MoE layer and one in every dense layer, every
MoE micro-layer holding exactly one dispatch send / receive and one combine send / receive, no DeepEP
kernel named anything but dispatch or combine, and steps without TBO (the bundled DeepEP recordings)
named as before (tests/test_reference_outputs.py holds their tables byte for byte).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from analysis.attribution.rows import SECTION_LAYER
from analysis.attribution.steps import segment_steps
from analysis.attribution.two_batch import two_batch_order
from analysis.ingest.trace_loader import load_trace
from analysis.pipeline import AnalysisOptions, analyze

DATA = Path(__file__).resolve().parent / "data" / "sglang-real"
TBO, TBO61, EP = DATA / "tbo", DATA / "tbo61", DATA / "ep"


def _files(folder: Path, config: str) -> list[str]:
    return sorted(str(p) for p in folder.glob(f"*-{config}-TP-*.trace.json.gz"))


CASES = {  # config: (folder, layers, dense layers, stages read)
    "deepep-tbo-dpattn-graph": (TBO, 4, 1, {"decode"}),
    "deepep-tbo-eager": (TBO, 4, 1, {"decode"}),
    "deepep-tbo-mtp-graph": (TBO, 4, 1, {"target_verify"}),
    "deep61-tbo-dpattn-graph": (TBO61, 61, 3, {"decode"}),
    "deep61-tbo-dpattn-eager": (TBO61, 61, 3, {"decode"}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    folder, layers, dense, stages = CASES[request.param]
    result = analyze(_files(folder, request.param), options=AnalysisOptions(run="tbo"))
    return request.param, result, layers, dense, stages


def test_every_step_has_the_models_layer_count(case):
    config, result, layers, _dense, stages = case
    read = [s for s in result.step_rows if s.stage in stages]
    assert read, config
    assert {s.layers_found for s in read} == {layers}, config
    assert {s.moe_layers_found for s in read} == {layers - CASES[config][2]}


def test_moe_layers_hold_two_micro_batches_and_dense_layers_one(case):
    config, result, layers, dense, stages = case
    per_layer: dict[int, set[int]] = {}
    for r in result.kernel_rows:
        if r.section == SECTION_LAYER and r.stage in stages:
            per_layer.setdefault(r.layer, set()).add(r.micro_batch)
    assert sorted(per_layer) == list(range(layers))
    assert all(per_layer[layer] == {0} for layer in range(dense))
    assert all(per_layer[layer] == {0, 1} for layer in range(dense, layers))


def test_each_micro_layer_sends_and_receives_once(case):
    config, result, _layers, _dense, stages = case
    counts = Counter((r.rank, r.step, r.layer, r.micro_batch, r.module) for r in result.kernel_rows
                     if r.section == SECTION_LAYER and r.stage in stages and "internode_ll::" in r.kernel_name)
    assert counts and set(counts.values()) == {2}, config  # dispatch: send + receive; combine: send + receive
    assert {key[-1] for key in counts} == {"dispatch", "combine"}


def test_no_deepep_kernel_is_named_experts(case):
    config, result, *_ = case
    names = {(r.group, r.module) for r in result.kernel_rows if "deep_ep::" in r.kernel_name}
    assert names <= {("moe", "dispatch"), ("moe", "combine")}, (config, names)


@pytest.mark.parametrize("config", sorted(CASES))
def test_no_self_check_fires_on_the_right_tables(config):
    folder, layers, _dense, _stages = CASES[config]
    result = analyze(_files(folder, config), options=AnalysisOptions(run="tbo", layers=layers))
    assert [(c.check, c.why) for c in result.failed_checks] == []
    assert {c.check for c in result.checks} >= {"layer_count", "layer_kernel_sequence", "layer_time", "after_layers"}


def test_read_without_two_batch_overlap_the_checks_say_why(monkeypatch):
    """The same trace with the micro-batch order switched off (the analysis before TBO was read): the
    table is wrong, and the layer count and the kernel sequences say so."""
    from analysis.attribution import two_batch_steps

    monkeypatch.setattr(two_batch_steps, "two_batch_order", lambda _kernels: None)
    result = analyze(_files(TBO, "deepep-tbo-dpattn-graph"), options=AnalysisOptions(run="tbo", layers=4))
    failed = {c.check: c.why for c in result.failed_checks}
    assert "layer_count" in failed and "7 layers" in failed["layer_count"]


@pytest.mark.parametrize("path", sorted(EP.glob("*.trace.json.gz"))[:6], ids=lambda p: p.name[:60])
def test_steps_without_two_batch_overlap_are_not_read_as_one(path):
    trace = load_trace(str(path))
    steps = segment_steps(trace, 1000.0)
    assert steps and all(two_batch_order(s.kernels) is None for s in steps)


def test_a_tbo_step_is_recognised_and_its_order_covers_every_kernel_once():
    trace = load_trace(_files(TBO, "deepep-tbo-dpattn-graph")[0])
    step = next(s for s in segment_steps(trace, 1000.0) if s.stage == "decode")
    plan = two_batch_order(step.kernels)
    assert plan is not None and plan.micro_layers == 6  # 3 MoE layers x 2 micro-batches
    assert sorted(plan.order) == list(range(len(step.kernels)))
    # the shared experts: two GEMMs and the activation between them, in each micro-layer
    assert len(plan.shared) >= 6 * 3


def _combine_flight_from_the_raw_trace(path: str, moe_layers: int) -> tuple[float, float, float]:
    """Straight from the trace's JSON, without the analysis: per MoE layer of a decode step, the
    combine's time in flight (send end to receive start), the busy time inside it (SGLang's schedule
    puts only the other micro-batch's attention core, gate and top-k there; the time some kernel
    runs, overlaps once) and the receive's busy time;
    both micro-batches summed, mean over the steps. A step is every 4 x moe_layers combine kernels in
    time order (two micro-batches, send and receive each): SGLang's step annotations overlap on the GPU."""
    import gzip
    import json

    events = json.load(gzip.open(path))["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    combines = [k for k in kernels if "internode_ll::combine" in k["name"]]
    per_step = 4 * moe_layers
    assert combines and len(combines) % per_step == 0
    totals = [0.0, 0.0, 0.0]
    for send, receive in zip(combines[::2], combines[1::2]):
        lo, hi = send["ts"] + send["dur"], receive["ts"]
        totals[0] += hi - lo
        covered, reach = 0.0, lo  # the time some kernel runs (kernels may overlap: programmatic launch)
        for k in kernels:
            start, end = max(k["ts"], reach), min(k["ts"] + k["dur"], hi)
            if end > start:
                covered += end - start
                reach = end
        totals[1] += covered
        totals[2] += receive["dur"]
    steps = len(combines) // per_step
    return tuple(t / steps / moe_layers for t in totals)


def test_the_combine_in_flight_matches_the_trace_read_without_the_analysis():
    files = _files(TBO, "deepep-tbo-dpattn-graph")
    result = analyze(files, options=AnalysisOptions(run="tbo"))
    rows = {(r.module, r.kernel): r.value_us for r in result.d4.tbo_rows}
    truth = [_combine_flight_from_the_raw_trace(f, 3) for f in files]
    flight, busy, recv = (sum(t[i] for t in truth) / len(truth) for i in range(3))  # the rank policy: mean
    assert rows[("combine", "in flight")] == pytest.approx(flight, rel=0.02)
    assert rows[("combine", "other micro-batch under it")] == pytest.approx(busy, rel=0.02)
    assert rows[("combine", "receive (exposed)")] == pytest.approx(recv, rel=0.02)
    # the dispatch's window also holds its own micro-batch's shared expert: the other's share is less
    assert 0 < rows[("dispatch", "other micro-batch under it")] < rows[("dispatch", "in flight")]


def test_no_two_batch_rows_without_two_batch_overlap():
    result = analyze(sorted(str(p) for p in EP.glob("*deepep-ll-graph-TP-*.trace.json.gz")),
                     options=AnalysisOptions(run="ep"))
    assert result.d4.tbo_rows == []


def test_tbo_expected_but_not_seen_is_said_and_nothing_doubled():
    """--tbo (a run's engine.two_batch_overlap) on the generic analysis is what the run expected: on a
    decode without TBO the layers are counted as they are (not doubled) and every step says so."""
    result = analyze(sorted(str(p) for p in EP.glob("*deepep-ll-graph-TP-*.trace.json.gz")),
                     options=AnalysisOptions(run="ep", layers=4, tbo=True))
    decode = [s for s in result.step_rows if s.stage == "decode"]
    assert {s.layers_found for s in decode} == {4} and {s.status for s in decode} == {"ok"}
    assert all("two-batch overlap expected" in s.note for s in decode)
    seen = analyze(_files(TBO, "deepep-tbo-dpattn-graph"), options=AnalysisOptions(run="tbo", layers=4, tbo=True))
    assert not any("two-batch overlap expected" in s.note for s in seen.step_rows)
