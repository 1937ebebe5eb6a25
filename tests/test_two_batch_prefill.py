"""Two-batch overlap in prefill, read from launch order, on the real PD prefill server's traces.

The recording (tests/data/sglang-real/pd-ray, SGLang 0.5.17, prefill TP2 EP2, DeepEP normal mode, TBO)
is of a 4-layer DeepSeek-V3-shaped model (layer 0 dense, 3 MoE: benchmarks/gpu/sglang_ray/
dsv3_4l_model.yaml). What is right is read off the model and the trace, not from the reader: 4 layers in
every step, micro-batches 0 and 1 in each MoE layer (the dense one runs the whole batch), one DeepEP
dispatch and one combine transfer per micro-batch and layer, as SGLang's prefill strategy launches them.
"""
from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from analysis.api import AnalysisOptions, analyze
from analysis.attribution.off_thread import split_off_thread_copies
from analysis.attribution.rows import SECTION_LAYER
from analysis.attribution.steps import segment_steps
from analysis.attribution.two_batch import two_batch_order
from analysis.attribution.two_batch_prefill import prefill_two_batch_order
from analysis.ingest.trace_loader import load_trace

DATA = Path(__file__).parent / "data" / "sglang-real"
TBO = sorted((DATA / "pd-ray").glob("*prefill_tbo-*/prefill/traces/*.trace.json.gz"))
NO_TBO = sorted((DATA / "pd").glob("*prefill-nostack-TP-*.trace.json.gz"))  # DeepEP normal prefill, one batch
LAYERS, DENSE = 4, 1


def _steps(path: Path):
    trace = load_trace(str(path))
    launched_by = {launch.correlation: launch.tid for launch in trace.launches}
    steps = segment_steps(trace, 1000.0)
    for step in steps:
        step.kernels, step.side = split_off_thread_copies(step.kernels, launched_by.get)
    return steps


@pytest.fixture(scope="module")
def analysed():
    assert len(TBO) == 2
    return analyze([str(p) for p in TBO], options=AnalysisOptions(run="prefill-tbo", layers=LAYERS))


@pytest.mark.parametrize("path", TBO, ids=lambda p: p.name[-28:])
def test_every_prefill_step_is_recognised_and_its_order_covers_every_kernel_once(path):
    steps = _steps(path)
    assert len(steps) == 5
    for step in steps:
        plan = prefill_two_batch_order(step.kernels)
        assert plan is not None, step.index
        assert sorted(plan.order) == list(range(len(step.kernels)))
        assert plan.micro_layers == 2 * (LAYERS - DENSE)
        assert two_batch_order(step.kernels) is None  # no low-latency kernel: the decode reader reads none


def test_every_step_has_the_models_layers_with_two_micro_batches(analysed):
    assert {(s.layers_found, s.moe_layers_found, s.status) for s in analysed.step_rows} == {(LAYERS, 3, "ok")}
    assert len(analysed.step_rows) == 10
    per_layer: dict[tuple[str, int, int], set[int]] = {}
    for r in analysed.kernel_rows:
        if r.section == SECTION_LAYER:
            per_layer.setdefault((r.rank, r.step, r.layer), set()).add(r.micro_batch)
    assert {key[2] for key in per_layer} == set(range(LAYERS))
    assert all(mbs == ({0} if layer < DENSE else {0, 1}) for (_, _, layer), mbs in per_layer.items())


def test_each_micro_layer_holds_its_own_stages_in_the_order_they_ran(analysed):
    """Per micro-layer, on the trace's own clock: its attention core, then its router GEMM and top-k,
    then its DeepEP dispatch, its routed experts, its combine; no kernel of a MoE layer is left unnamed."""
    layers: dict[tuple, dict[str, list]] = {}
    for r in analysed.kernel_rows:
        if r.section == SECTION_LAYER and r.layer >= DENSE:
            layers.setdefault((r.rank, r.step, r.layer, r.micro_batch), {}).setdefault(r.module, []).append(r)
    assert len(layers) == 10 * 3 * 2
    for key, modules in layers.items():
        core = [r for r in modules["attn_core"] if r.kernel_name == "_fwd_kernel"]
        dispatch = [r for r in modules["dispatch"] if "intranode::dispatch<" in r.kernel_name]
        combine = [r for r in modules["combine"] if "intranode::combine<" in r.kernel_name]
        assert len(core) == len(dispatch) == len(combine) == 1, key
        core_end = core[0].start_us + core[0].busy_us
        assert all(core_end <= r.start_us < dispatch[0].start_us for r in modules["router"] + modules["topk"]), key
        assert all(dispatch[0].start_us < r.start_us < combine[0].start_us
                   for r in modules["up_gate_gemm"] + modules["down_gemm"]), key
        assert "other" not in modules, (key, [r.kernel_name[:60] for r in modules["other"]])


def test_each_micro_layer_dispatches_and_combines_once(analysed):
    transfers = Counter((r.rank, r.step, r.layer, r.micro_batch, r.module) for r in analysed.kernel_rows
                        if r.kernel_name.startswith(("void deep_ep::intranode::dispatch<",
                                                     "void deep_ep::intranode::combine<")))
    assert len(transfers) == 10 * 3 * 2 * 2 and set(transfers.values()) == {1}
    assert {key[-1] for key in transfers} == {"dispatch", "combine"}
    names = {(r.group, r.module) for r in analysed.kernel_rows if "deep_ep::" in r.kernel_name}
    assert names <= {("moe", "dispatch"), ("moe", "combine")}, names


def test_no_self_check_fires(analysed):
    assert [(c.check, c.why) for c in analysed.failed_checks] == []
    assert {c.check for c in analysed.checks} >= {"layer_count", "layer_kernel_sequence", "layer_time"}


def test_read_as_one_batch_the_checks_say_why(monkeypatch):
    """The reader switched off (the analysis before it): 7 layers for 4, and the checks say so."""
    from analysis.attribution import two_batch_steps

    monkeypatch.setattr(two_batch_steps, "prefill_two_batch_order", lambda _kernels: None)
    result = analyze([str(p) for p in TBO], options=AnalysisOptions(run="prefill-tbo", layers=LAYERS))
    failed = {c.check: c.why for c in result.failed_checks}
    assert "layer_count" in failed and "7 layers" in failed["layer_count"]


@pytest.mark.parametrize("path", NO_TBO, ids=lambda p: p.name[-28:])
def test_a_prefill_without_two_batch_overlap_is_not_read_as_one(path):
    steps = _steps(path)
    assert steps and all(prefill_two_batch_order(s.kernels) is None for s in steps)


def test_a_decode_two_batch_step_is_left_to_the_decode_reader():
    path = sorted((DATA / "tbo").glob("*deepep-tbo-eager-TP-0*.trace.json.gz"))[0]
    step = next(s for s in _steps(path) if s.stage == "decode")
    assert two_batch_order(step.kernels) is not None and prefill_two_batch_order(step.kernels) is None


@pytest.mark.parametrize("paths", [TBO, NO_TBO], ids=["tbo", "one-batch"])
def test_the_prefill_attention_is_named_as_mla_expanded(paths):
    """SGLang's prefill runs MLA's MHA path: q_a and kv_a in one GEMM, the q_a layernorm, q_b, the kv_a
    layernorm, the rotary and the KV-cache write, then kv_b expanding the cache before the core. Its
    GEMMs and norms read as plain q / k / v projections and q / k norms before (in every prefill table);
    Qwen3's q / k norms, whose rotary runs after all three projections, still do (the accuracy suite)."""
    result = analyze([str(p) for p in paths], options=AnalysisOptions(run="prefill", layers=LAYERS))
    modules = {r.module for r in result.kernel_rows if r.group == "attention" and r.stage == "extend"}
    assert {"q_a_kv_a", "q_a_layernorm", "q_proj_b", "kv_a_layernorm", "kv_b_proj"} <= modules
    assert not modules & {"qkv_proj", "qk_norm"}, modules
    kv_b = [r for r in result.kernel_rows if r.module == "kv_b_proj" and "gemm" in r.kernel_name]
    assert kv_b and all("sm90_fp8_gemm" in r.kernel_name for r in kv_b)


def test_a_step_read_wrong_is_refused_never_raised():
    """Real prefill TBO steps with one kernel dropped or two swapped in launch order (seeded): the reader
    answers None or an order covering every kernel once, and never raises."""
    import random

    rng = random.Random(48)
    step = _steps(TBO[0])[1]
    plans = 0
    for _ in range(300):
        kernels = list(step.kernels)
        if rng.random() < 0.5:
            del kernels[rng.randrange(len(kernels))]
        else:
            i, j = rng.randrange(len(kernels)), rng.randrange(len(kernels))
            a, b = kernels[i], kernels[j]
            kernels[i] = msgspec.structs.replace(a, correlation=b.correlation)
            kernels[j] = msgspec.structs.replace(b, correlation=a.correlation)
        plan = prefill_two_batch_order(kernels)
        if plan is not None:
            plans += 1
            assert sorted(plan.order) == list(range(len(kernels)))
    assert 0 < plans < 300  # some variants still read (a dropped copy), some refused


def test_experts_blocks_that_differ_are_refused():
    """A kernel more in micro-batch B's experts block than in A's (launched after B's dispatch): the two
    blocks no longer repeat each other, so where B's stage ends is unknown and the step is read as one
    batch rather than cut at a guessed place."""
    from analysis.ingest.kernel_classes import class_of_name

    step = _steps(TBO[0])[1]
    kernels = [msgspec.structs.replace(k, correlation=2 * k.correlation) for k in step.kernels]
    launch = sorted(kernels, key=lambda k: k.correlation)
    dispatch_starts = [i for i, k in enumerate(launch) if class_of_name(k.name) == "dispatch"
                       and (i == 0 or class_of_name(launch[i - 1].name) != "dispatch")]
    after_b = launch[dispatch_starts[1] + 3]  # a kernel of B's first experts block, after its dispatch
    extra = msgspec.structs.replace(after_b, correlation=after_b.correlation + 1)
    assert prefill_two_batch_order(kernels) is not None
    assert prefill_two_batch_order([*kernels, extra]) is None


def _covered(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of [lo, hi] covered by the union of intervals (sweep over sorted ends, written for this test)."""
    total, reach = 0.0, lo
    for s, e in sorted(intervals):
        s, e = max(s, reach), min(e, hi)
        if e > s:
            total += e - s
            reach = e
    return total


def test_the_two_batch_rows_hold_what_the_kernels_say(analysed):
    """Per MoE layer, both micro-batches summed, mean over steps then ranks: each dispatch's and combine's
    DeepEP launch group from its first start to its last end (in flight), the other micro-batch's kernels
    inside that span (under it), and the group's time no other stream covered (exposed), recomputed here
    from the kernel rows by a sweep of this test's own."""
    deep_ep = ("deep_ep::layout::", "deep_ep::intranode::")
    per_rank: dict[tuple[str, str, str], list[float]] = {}
    steps = {(r.rank, r.step) for r in analysed.kernel_rows}
    for rank, step in sorted(steps):
        rows = [r for r in analysed.kernel_rows if (r.rank, r.step) == (rank, step) and r.section == SECTION_LAYER]
        moe = sorted({r.layer for r in rows if r.micro_batch == 1})
        sums: dict[tuple[str, str], float] = {}
        for layer in moe:
            for mb in (0, 1):
                other = [(r.start_us, r.start_us + r.busy_us) for r in rows if r.micro_batch == 1 - mb]
                for module in ("dispatch", "combine"):
                    group = [r for r in rows if (r.layer, r.micro_batch, r.module) == (layer, mb, module)
                             and r.kernel_name.removeprefix("void ").startswith(deep_ep)]
                    lo, hi = min(r.start_us for r in group), max(r.start_us + r.busy_us for r in group)
                    for part, value in (("in flight", hi - lo), ("other micro-batch under it", _covered(other, lo, hi)),
                                        ("exposed", sum(r.exposed_us for r in group))):
                        sums[(module, part)] = sums.get((module, part), 0.0) + value
        for (module, part), value in sums.items():
            per_rank.setdefault((rank, module, part), []).append(value / len(moe))
    rows = {(r.module, r.kernel): r.value_us for r in analysed.d4.tbo_rows}
    assert len(rows) == 6
    for module in ("dispatch", "combine"):
        for part in ("in flight", "other micro-batch under it", "exposed"):
            ranks = [statistics.fmean(v) for (rank, m, p), v in per_rank.items() if (m, p) == (module, part)]
            assert rows[(module, part)] == pytest.approx(statistics.fmean(ranks), rel=1e-9), (module, part)
        assert rows[(module, "other micro-batch under it")] <= rows[(module, "in flight")]
        assert rows[(module, "exposed")] <= rows[(module, "in flight")]
