"""Self-checks (analysis/tables/self_checks.py): each one fails where its rule is broken, and none
fires on the bundled real traces, the public real traces or the accuracy suite.

The failing cases start from a correct analysis of a SYNTHETIC DeepSeek-V3 trace (4 layers: 1 dense
+ 3 MoE, known durations; tests/synthetic_deepseek.py) and break one thing in its rows, the way a
wrong attribution or a bad trace would.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import msgspec
import pytest

from analysis.pipeline import AnalysisOptions, analyze
from analysis.ingest.kernel_classes import class_of_name
from analysis.attribution.rows import KernelRow
from analysis.errors import AnalysisError
from analysis.ingest.model_spec import load_model_spec
from analysis.tables.self_checks import FAIL, PASS, run_checks, verdict_line
from analysis.attribution.signature import load_signature
from conftest import ROOT, real_trace
from harness.cli import main
from synthetic_deepseek import write_rank_trace
from test_real_traces import SERVING

SIGNATURE = "sglang-sm90-deepep-ll"
MI300_LLAMA = "amd/sglang_ds-r1-distill-llama-8b_mi300x/1782841132.2905657-TP-0-DECODE.trace.json.gz"
MI300_QWEN3_MOE = "amd/sglang_qwen3-30b-a3b_mi300x/1782859605.7198358-TP-0-DECODE.trace.json.gz"


def _model_file(tmp_path: Path, **shapes) -> str:
    """A 4-layer DeepSeek-V3 model file (1 dense + 3 MoE), with the shapes given."""
    path = tmp_path / "dsv3-4l.yaml"
    doc = {"name": "dsv3-4l", "num_layers": 4, "first_k_dense_replace": 1, "shapes": shapes or None}
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("self-checks")
    path = tmp / "syn-TP-0-DECODE.trace.json.gz"
    write_rank_trace(path, load_signature(SIGNATURE), num_layers=4, dense_layers=1, steps=3)
    result = analyze([str(path)], signature=SIGNATURE, options=AnalysisOptions(layers=4))
    return path, result


def _verdicts(checks, name):
    return [c.verdict for c in checks if c.check == name]


def _rerun(result, kernel_rows=None, step_rows=None, model=None, layers=4):
    return run_checks(kernel_rows if kernel_rows is not None else result.kernel_rows,
                      step_rows if step_rows is not None else result.step_rows, result.d4, model, layers)


def test_a_correct_analysis_passes_every_check(synthetic):
    _path, result = synthetic
    assert not result.failed_checks, result.failed_checks
    assert {c.check for c in result.checks} == {
        "layer_count", "layer_kernel_sequence", "layer_time", "after_layers", "attention_cores_in_layers",
        "routed_vs_shared_experts", "step_time_shares", "stage_labels", "kernel_durations", "profiler_overhead"}
    assert result.d4.checks.startswith("self-checks: ") and "0 failed" in result.d4.checks


def test_layer_count_against_the_expected_one(synthetic):
    path, _ = synthetic
    result = analyze([str(path)], signature=SIGNATURE, options=AnalysisOptions(layers=5))
    row = next(c for c in result.checks if c.check == "layer_count")
    assert row.verdict == FAIL and row.expected == "5 (--layers)" and "4 layers in 3 step(s)" in row.value
    assert any("self-check layer_count failed" in p.message for p in result.problems)
    assert "1 failed" in result.d4.checks and "layer_count" in result.d4.checks


def test_layer_count_against_a_model_files_dense_and_moe_split(synthetic, tmp_path):
    path, _ = synthetic
    wrong_split = tmp_path / "dsv3-2d.yaml"
    wrong_split.write_text(json.dumps({"name": "dsv3-2d", "num_layers": 4, "first_k_dense_replace": 2}))
    result = analyze([str(path)], model=str(wrong_split))  # the structure tells dense from MoE layers
    row = next(c for c in result.checks if c.check == "layer_count")
    assert row.verdict == FAIL and "model dsv3-2d" in row.expected and "2 + 2" in row.why


def test_layer_count_without_an_expected_one_is_constant_over_steps_and_ranks(synthetic):
    _path, result = synthetic
    unexpected = [msgspec.structs.replace(s, layers_expected=None) for s in result.step_rows]
    assert _verdicts(_rerun(result, step_rows=unexpected, layers=None), "layer_count") == [PASS]
    one_short = [msgspec.structs.replace(s, layers_found=3) if s.step == 1 else s for s in unexpected]
    row = next(c for c in _rerun(result, step_rows=one_short, layers=None) if c.check == "layer_count")
    assert row.verdict == FAIL and "3 layers in 1 step(s)" in row.value and "same count" in row.expected


def test_a_layer_whose_kernel_classes_differ_from_its_kind_is_named(synthetic):
    _path, result = synthetic
    # the o_proj GEMM of MoE layer 2 in step 1 taken into layer 3 (a misplaced layer border): layer 3
    # starts with a GEMM where the others start with their input norm
    moved = False
    rows = []
    for r in result.kernel_rows:
        if not moved and (r.step, r.layer, r.module) == (1, 2, "o_proj") and class_of_name(r.kernel_name) == "gemm":
            r = msgspec.structs.replace(r, layer=3, start_us=r.start_us)
            moved = True
        rows.append(r)
    assert moved
    row = next(c for c in _rerun(result, kernel_rows=rows) if c.check == "layer_kernel_sequence")
    assert row.verdict == FAIL and "TP0 step 1 layer 3" in row.why and "MoE layer 3 has gemm" in row.why


def test_kernel_class_sequence_ignores_loop_repeats():
    from analysis.tables.self_check_parts import without_repeats as _without_repeats

    loop = ("gemm", "act", "gemm", "moe_finalize")
    assert _without_repeats(("norm", *loop * 5, "norm")) == _without_repeats(("norm", *loop * 2, "norm"))
    assert _without_repeats(("norm", "gemm", "norm")) != _without_repeats(("norm", "gemm", "act", "norm"))


def test_an_attention_core_outside_every_layer_fails(synthetic):
    _path, result = synthetic
    core = next(i for i, r in enumerate(result.kernel_rows) if class_of_name(r.kernel_name) == "attn_core")
    rows = list(result.kernel_rows)
    rows[core] = msgspec.structs.replace(rows[core], section="post", layer=-1)
    row = next(c for c in _rerun(result, kernel_rows=rows) if c.check == "attention_cores_in_layers")
    assert row.verdict == FAIL and row.value.startswith("1 of ") and "post section" in row.why


def _routed_taken_for_shared(result):
    return [msgspec.structs.replace(r, group="combine/share overlap", module="shared_experts")
            if r.group == "moe" and r.module in ("up_gate_gemm", "down_gemm") else r for r in result.kernel_rows]


def test_routed_experts_smaller_than_the_shared_expert_fail(synthetic, tmp_path):
    _path, result = synthetic
    model = load_model_spec(_model_file(tmp_path, num_experts_per_tok=8, n_shared_experts=1))
    swapped = _routed_taken_for_shared(result)
    with_model = next(c for c in _rerun(result, kernel_rows=swapped, model=model) if c.check == "routed_vs_shared_experts")
    assert with_model.verdict == FAIL and "8 experts per token >= 1 shared" in with_model.expected
    without = next(c for c in _rerun(result, kernel_rows=swapped) if c.check == "routed_vs_shared_experts")
    assert without.verdict == FAIL, "a wholesale swap is flagged without a model too"
    # a model with more shared experts than experts per token says nothing about their sizes
    many_shared = load_model_spec(_model_file(tmp_path, num_experts_per_tok=1, n_shared_experts=2))
    assert _verdicts(_rerun(result, kernel_rows=swapped, model=many_shared), "routed_vs_shared_experts") == ["n/a"]


def test_step_time_outside_layers_in_other_or_unattributed_fails(synthetic):
    _path, result = synthetic
    unattributed = [msgspec.structs.replace(r, group="unattributed", module="unattributed")
                    if r.group == "attention" else r for r in result.kernel_rows]
    row = next(c for c in _rerun(result, kernel_rows=unattributed) if c.check == "step_time_shares")
    assert row.verdict == FAIL and "unattributed" in row.why
    other = [msgspec.structs.replace(r, group="other") if r.group == "attention" else r for r in result.kernel_rows]
    assert "`other`" in next(c for c in _rerun(result, kernel_rows=other) if c.check == "step_time_shares").why
    outside = [msgspec.structs.replace(r, section="post", layer=-1) if r.layer > 0 else r for r in result.kernel_rows]
    row = next(c for c in _rerun(result, kernel_rows=outside) if c.check == "step_time_shares")
    assert row.verdict == FAIL and "inside the found layers" in row.why


def test_a_step_label_the_analysis_does_not_know_fails(tmp_path):
    path = tmp_path / "renamed-TP-0-DECODE.trace.json.gz"
    labels = {"decode": "DECODE", "verify": "VERIFY_V3", "draft": "DECODE", "draft_extend": "DRAFT_EXTEND"}
    write_rank_trace(path, load_signature(SIGNATURE), num_layers=4, dense_layers=1, steps=1, mtp_draft_steps=1,
                     labels=labels)
    result = analyze([str(path)], signature=SIGNATURE)
    row = next(c for c in result.checks if c.check == "stage_labels")
    assert row.verdict == FAIL and "VERIFY_V3 (1 steps)" in row.why


@pytest.mark.parametrize("bad", [math.nan, math.inf, -3.0, "next step"])
def test_bad_kernel_durations_fail(synthetic, bad):
    _path, result = synthetic
    rows = list(result.kernel_rows)
    first_step = [i for i, r in enumerate(rows) if r.step == 0]
    victim = first_step[len(first_step) // 2]
    if bad == "next step":  # a duration that runs past the start of the rank's next step
        next_start = min(s.start_us for s in result.step_rows if s.step == 1)
        bad = next_start - rows[victim].start_us + 50.0
    rows[victim] = msgspec.structs.replace(rows[victim], busy_us=bad)
    row = next(c for c in _rerun(result, kernel_rows=rows) if c.check == "kernel_durations")
    assert row.verdict == FAIL and row.value.startswith("1 of "), row


def test_checks_csv_analysis_json_and_the_verdict_line_under_the_table(synthetic, tmp_path):
    path, _ = synthetic
    out = tmp_path / "out"
    assert main(["analyze", str(path), "--signature", SIGNATURE, "--layers", "5", "--out", str(out)]) == 0
    with open(out / "checks.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["check", "scope", "value", "expected", "verdict", "why"]
    assert [r["check"] for r in rows if r["verdict"] == "fail"] == ["layer_count"]
    saved = json.loads((out / "analysis.json").read_text())
    assert saved["checks"]["failed"] == ["layer_count"] and saved["d4"]["failed_checks"] == ["layer_count"]
    # profiler_overhead: not applicable without load records
    assert "self-checks: 8 passed, 1 failed, 1 not applicable" in (out / "d4.md").read_text()
    with open(out / "problems.csv", newline="") as fh:
        assert any("self-check layer_count failed" in r["message"] for r in csv.DictReader(fh))


def test_strict_fails_the_command_on_a_failed_check_and_keeps_the_files(synthetic, tmp_path, capsys):
    path, _ = synthetic
    out = tmp_path / "strict"
    plain = _model_file(tmp_path)  # 4 layers, 1 dense + 3 MoE: every step matches
    assert main(["analyze", str(path), "--signature", SIGNATURE, "--model", plain, "--strict", "--out", str(out)]) == 0
    capsys.readouterr()
    # the SYNTHETIC trace's shared expert outlasts its routed experts, which a model with 8 experts
    # per token and 1 shared expert says cannot be
    shaped = _model_file(tmp_path, num_experts_per_tok=8, n_shared_experts=1)
    assert main(["analyze", str(path), "--signature", SIGNATURE, "--model", shaped, "--out", str(out),
                 "--overwrite"]) == 0  # the same command's earlier output: replaced only on request
    assert "routed_vs_shared_experts" in capsys.readouterr().out
    code = main(["analyze", str(path), "--signature", SIGNATURE, "--model", shaped, "--strict", "--out", str(out),
                 "--overwrite"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("moe-harness analyze: --strict: self-check failed: routed_vs_shared_experts")
    assert (out / "checks.csv").exists() and (out / "d4.md").exists()


def test_compare_strict_fails_on_a_column_whose_checks_failed(synthetic, tmp_path, capsys):
    path, _ = synthetic
    out = tmp_path / "saved"
    assert main(["analyze", str(path), "--signature", SIGNATURE, "--layers", "5", "--out", str(out)]) == 0
    assert main(["compare", f"a={out}", "--strict"]) == 1
    assert "self-check failed in a: layer_count" in capsys.readouterr().err
    assert main(["compare", f"a={out}"]) == 0


def test_a_signature_whose_anchor_matches_nothing_is_an_error(synthetic, tmp_path):
    path, _ = synthetic
    sig = (ROOT / "analysis" / "data" / "signatures" / f"{SIGNATURE}.yaml").read_text()
    anchor = "match: 'flash_fwd_splitkv_mla_kernel|FlashAttnFwdSm90|flash_fwd_mla_kernel', anchor: true"
    assert anchor in sig
    broken = tmp_path / "no-anchor.yaml"
    broken.write_text(sig.replace(anchor, "match: 'no_kernel_is_called_this', anchor: true"))
    with pytest.raises(AnalysisError, match=r"no layers found in any of the 3 decode steps: signature .*anchor .*"
                                            r"no_kernel_is_called_this.* matches no kernel"):
        analyze([str(path)], signature=str(broken))
    assert main(["analyze", str(path), "--signature", str(broken)]) == 2  # an analysis error: exit 2


def test_strict_that_leaves_out_every_step_fails_the_command(synthetic, capsys):
    path, _ = synthetic
    assert main(["analyze", str(path), "--signature", SIGNATURE, "--layers", "61", "--strict"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--strict left out all 3 decode steps" in err[0] and "expected 61" in err[0]


# ---------------------------------------------------------------- none fires where the analysis is right


# Every bundled real trace, the PD pair's prefill role with two-batch overlap included (read since
# 2026-11-29: analysis/attribution/two_batch_prefill.py; before, its table was wrong and these checks said so).
PD_RAY = "tests/data/sglang-real/pd-ray"
BUNDLED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "data").rglob("*.trace.json.gz")
                 if "accuracy" not in p.parts and "graph_capture_profile" not in p.parts)


@pytest.mark.parametrize("rel", BUNDLED)
def test_no_check_fires_on_the_bundled_real_traces(rel):
    result = analyze([str(ROOT / rel)], options=AnalysisOptions(jobs=1))
    assert not result.failed_checks, result.failed_checks


# Eager traces without stacks where SGLang's shared expert runs on its own stream beside the gate and
# timing alone put some of its kernels on the layers' chain (they overlapped nothing): the router's GEMM
# was named shared_experts and the shared down GEMM the router (PD prefill ranks, every MoE layer of some
# steps), or the shared block's kernels routed experts and the routed GEMMs one role off (the MTP decode
# without stacks, one layer); layer_kernel_sequence fired on some of them. The truth here is the stream:
# SGLang 0.5.17 launches the shared expert, and only it, on that stream (docs/gpu-runs.md).
SHARED_STREAM = sorted(str(p.relative_to(ROOT)) for p in (ROOT / PD_RAY).glob(
    "sglang_dsv3_4l_pd_mooncake-20261128-065033/prefill/traces/*.trace.json.gz")) + sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "tests/data/sglang-real/mtp").glob("*-nostack-TP-*.trace.json.gz"))


@pytest.mark.parametrize("rel", SHARED_STREAM)
def test_the_shared_expert_on_its_own_stream_is_named_so_wherever_it_ran(rel):
    from analysis.ingest.kernel_classes import class_of_name

    result = analyze([str(ROOT / rel)], options=AnalysisOptions(jobs=1))
    rows = [r for r in result.kernel_rows if r.section == "layer"]
    gemm_streams = {r.stream for r in rows if class_of_name(r.kernel_name) == "gemm"}
    main = max(gemm_streams, key=lambda s: sum(1 for r in rows if r.stream == s))
    shared_streams = gemm_streams - {main}  # the MTP draft model's shared expert has a stream of its own
    assert shared_streams, gemm_streams
    on_it = [r for r in rows if r.stream in shared_streams]
    moe_layers = sum(s.moe_layers_found or 0 for s in result.step_rows)
    assert len(on_it) >= 5 * moe_layers * 0.9  # quant, gate-up, act, quant, down in (nearly) every MoE layer
    assert {r.module for r in on_it} == {"shared_experts"}, {(r.module, r.kernel_name[:40]) for r in on_it}
    named_shared_elsewhere = [r for r in rows if r.module == "shared_experts" and r.stream not in shared_streams]
    assert not named_shared_elsewhere, {(r.step, r.layer, r.kernel_name[:40]) for r in named_shared_elsewhere}
    assert not result.failed_checks


# The MI300X Llama decode is left out: its kernel order is broken in places and the
# layer_kernel_sequence check says so (tests/test_layer_count_interleaved.py holds what it names).
PUBLIC = sorted({(rel, layers) for rel, _sig, layers in SERVING if rel != MI300_LLAMA} | {(MI300_QWEN3_MOE, 48)}) + [
    ("nvidia/deepseek-v3_train_h800/train.json", None)]


@pytest.mark.parametrize("rel,layers", PUBLIC)
def test_no_check_fires_on_the_public_real_traces(rel, layers):
    result = analyze([real_trace(rel)], options=AnalysisOptions(layers=layers, jobs=1))
    assert not result.failed_checks, result.failed_checks


def test_no_check_fires_on_the_accuracy_suite():
    from benchmarks.accuracy.suite_cases import bundled_cases, corpus_cases

    for case in corpus_cases() + bundled_cases():
        result = analyze([str(case.path)], options=AnalysisOptions(layers=case.layers, jobs=1))
        assert not result.failed_checks, (case.name, result.failed_checks)


def test_the_verdict_line_names_each_failed_check():
    from analysis.tables.self_checks import CheckRow

    rows = [CheckRow("a", "s", "1", "2", PASS), CheckRow("b", "TP0", "3 of 4", "0", FAIL, "why"),
            CheckRow("c", "s", "", "", "n/a")]
    line = verdict_line(rows)
    assert line.startswith("self-checks: 1 passed, 1 failed, 1 not applicable: b (TP0): 3 of 4, expected 0")


def _row(start_us: float, busy_us: float, name: str) -> KernelRow:
    return KernelRow("run", "TP0", 0, "decode", "layer", 0, 0, "moe", "m", name, name, 7, start_us, busy_us, busy_us,
                     "structure")


def _read_as_columns(rows: list[KernelRow]):
    """The self-checks' reading (analysis/tables/self_check_columns.py) of these rows of one rank, each
    step's rows together: what its check functions take."""
    from analysis.attribution.kernel_columns import KernelColumns
    from analysis.tables.column_cells import step_bounds
    from analysis.tables.self_check_columns import _Rows

    columns = KernelColumns.of_rows(rows)
    return _Rows(columns, {int(columns.step[first]): (first, end) for first, end in step_bounds(columns.step)})


@pytest.mark.parametrize("seed", range(60))
def test_the_far_gap_found_in_the_durations_pass_is_the_one_sorting_finds(seed):
    """SYNTHETIC rows, random: one wide idle gap among small ones, found by the durations check's array
    pass where the rows come by start; _far_gap, which sorts them first, gives the answer (rows out of
    order, a negative or non-finite duration first or later, ties, a first row ending after the gap)."""
    import random

    from analysis.attribution.rows import StepRow
    from analysis.tables.self_check_columns import _durations
    from analysis.tables.self_check_parts import RankChecks, _far_gap

    rng = random.Random(seed)
    count = rng.randint(3, 40)
    wide_at = rng.randrange(1, count)
    odd_at = 0 if seed % 2 else rng.randrange(count)
    rows, t = [], 1e12
    for i in range(count):
        t += 1e6 if i == wide_at else rng.choice([0.0, 1.0, 5.0])
        busy = rng.choice([10.0, -3.0, math.inf, math.nan, math.nan, 3e6]) if i == odd_at else rng.choice([2.0, 10.0])
        rows.append(_row(t, busy, f"k{i}"))
    if seed % 3 == 0:  # one row out of start order
        i = rng.randrange(1, count)
        rows[i] = _row(rows[0].start_us - rng.choice([0.5, 2e6]), 10.0, "late")
    limits = {"slack_us": 10.0, "far_gap_s": 0.1, "far_gap_ratio": 0.5}
    step = StepRow("run", "TP0", 0, "decode", rows[0].start_us, rows[-1].start_us, 1.0, 1.0, 1.0, 1.0, count, 1, 1,
                   "ok", "gap")
    part = RankChecks("TP0", "decode", False)
    _durations(part, [step], _read_as_columns(rows), limits)
    said = [b for b in part.first_bad_durations if "from the rest of its step" in b]
    expected = _far_gap(rows, limits["far_gap_s"] * 1e6, limits["far_gap_ratio"])
    assert said == ([f"TP0 step 0: {expected}"] if expected else [])


def _random_step_rows(rng, step: int, count: int) -> list[KernelRow]:
    """SYNTHETIC rows of one step: sections, groups and modules mixed, starts with ties."""
    groups = ["moe", "attention", "communication", "other", "unattributed", "combine/share overlap"]
    modules = ["shared_experts", "dispatch", "combine", "router", "topk", "experts", "attn"]
    rows = []
    for i in range(count):
        section = rng.choice(["pre", "layer", "layer", "layer", "layer", "post"])
        layer = rng.randrange(5) if section == "layer" else -1
        rows.append(KernelRow("run", "TP0", step, "decode", section, layer, 0, rng.choice(groups), rng.choice(modules),
                              f"k{rng.randrange(3)}", f"name{i}", 7, rng.choice([0.0, 1.0, 2.0, 3.0, 5.0]),
                              rng.choice([rng.uniform(0.1, 9.9), rng.uniform(50.0, 90.0), 0.1, 0.2, 0.7]), 0.0,
                              "structure"))
    return rows


@pytest.mark.parametrize("seed", range(40))
def test_the_reading_of_rows_is_the_plain_loops_on_odd_times_and_steps_apart(seed):
    """SYNTHETIC rows of one rank, random (tests/self_check_rows.py's plain loops are the truth): times
    that are not numbers, infinite or negative anywhere, a step with no layer kernel, two micro-batches,
    several streams, and the steps' rows interleaved (each step's in order): the part read through
    columns (rank_checks_of_rows) is the part the loops read."""
    import random

    from analysis.attribution.rows import StepRow
    from analysis.tables.self_check_columns import rank_checks_of_rows
    from analysis.tables.self_checks import thresholds
    from self_check_rows import rank_checks, rows_by_step

    rng = random.Random(seed)
    steps, every = [], []
    for step in range(4):
        rows = _random_step_rows(rng, step, rng.randint(0, 40))
        if step == 3:  # no layer kernel
            rows = [msgspec.structs.replace(r, section="post", layer=-1) for r in rows]
        for r in rows:
            r.start_us += 1000.0 * step
            r.stream = rng.choice([7, 7, 7, 9])
            r.micro_batch = rng.choice([0, 1]) if seed % 2 else 0
            r.kernel_name = rng.choice(["flash_attn_fwd", "nccl_allreduce", "gemm_bf16", "rmsnorm", r.kernel_name])
        for r in rng.sample(rows, min(len(rows), rng.randint(0, 3))):
            if rng.random() < 0.5:
                r.start_us = rng.choice([math.nan, math.inf, -math.inf, r.start_us + 5000.0])
            else:
                r.busy_us = rng.choice([math.nan, math.inf, -2.0, 3000.0])
        starts = [r.start_us for r in rows if math.isfinite(r.start_us)]
        steps.append(StepRow("run", "TP0", step, "decode", min(starts, default=1000.0 * step), 1.0, 1.0, 1.0, 1.0, 1.0,
                             len(rows), 1, 1, rng.choice(["ok", "ok", "no_layers"]), "gap"))
        every.append(rows)
    interleaved = []
    while any(every):  # the steps' rows apart, each step's in its order
        interleaved.append(rng.choice([rows for rows in every if rows]).pop(0))
    limits = thresholds()
    for strict in (False, True):
        expected = rank_checks("TP0", steps, rows_by_step(interleaved), "decode", strict, {}, limits)
        assert repr(rank_checks_of_rows("TP0", steps, interleaved, "decode", strict, {}, limits)) == repr(expected)


def _mixes_written_out(rows: list[KernelRow]) -> dict[str, list[tuple[int, dict]]]:
    """Each layer's kind and its kernels' compute, plainly: what step_layer_mixes must give."""
    from collections import defaultdict

    mixes: dict[int, dict] = {}
    moe: dict[int, bool] = {}
    for r in rows:
        if r.section != "layer":
            continue
        moe[r.layer] = moe.get(r.layer, False) or r.group in ("moe", "combine/share overlap") \
            or r.module in ("router", "topk", "shared_experts")
        mix = mixes.setdefault(r.layer, defaultdict(float))
        if r.group != "communication" and r.module not in ("dispatch", "combine"):
            mix[(r.group, r.module, r.kernel)] += r.busy_us
    by_kind: dict[str, list] = {}
    for layer in sorted(mixes):
        by_kind.setdefault("MoE" if moe[layer] else "dense", []).append((layer, dict(mixes[layer])))
    return by_kind


@pytest.mark.parametrize("seed", range(30))
def test_the_array_pass_over_the_used_steps_reads_what_each_check_reads(seed):
    """SYNTHETIC rows, random: the array pass over the used steps (self_check_columns._used_steps and
    _layer_sums) gives what each check reads, written out plainly here: a kernel outside the layers at
    or after the first layer kernel, the step-time sums added in row order across steps, the routed and
    shared experts' time, each layer's kind and compute, and step_layer_mixes each layer's kernels."""
    import random

    from analysis.attribution.rows import StepRow
    from analysis.tables.self_check_columns import _layer_sums, _used_steps
    from analysis.tables.self_check_parts import RankChecks, step_layer_mixes

    rng = random.Random(seed)
    expected_sums = dict.fromkeys(("busy", "in_layers", "other", "unattributed", "waiting"), 0.0)
    every, used, expected_ratios, expected_routed, expected_shared = [], [], [], 0.0, 0.0
    for step in range(3):  # the sums run on across the steps
        rows = _random_step_rows(rng, step, rng.randint(0, 30))
        layer_starts = [r.start_us for r in rows if r.section == "layer"]
        if seed % 2 and layer_starts and any(r.section != "layer" for r in rows):  # a tie at the first layer kernel
            next(r for r in rows if r.section != "layer").start_us = min(layer_starts)
        routed = shared = 0.0
        for r in rows:
            expected_sums["busy"] += r.busy_us
            if r.group == "unattributed":
                expected_sums["unattributed"] += r.busy_us
            if r.section != "layer" and r.group == "communication":
                expected_sums["waiting"] += r.busy_us
            if r.section == "layer":
                expected_sums["in_layers"] += r.busy_us
                if r.group == "other":
                    expected_sums["other"] += r.busy_us
                if r.module == "shared_experts":
                    shared += r.busy_us
                elif r.group == "moe" and r.module not in ("dispatch", "combine"):
                    routed += r.busy_us
        expected_routed += routed
        expected_shared += shared
        if shared:
            expected_ratios.append(routed / shared)
        every += rows
        used.append(StepRow("run", "TP0", step, "decode", 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, len(rows), 1, 1, "ok", "gap"))
    read = _read_as_columns(every)
    for step_row in used:
        rows = [r for r in every if r.step == step_row.step]
        layer_starts = [r.start_us for r in rows if r.section == "layer"]
        first = min(layer_starts) if layer_starts else math.inf
        mixes = _mixes_written_out(rows)
        if not rows:
            assert step_row.step not in read.at
            continue
        layer_us, after = _layer_sums(read, *read.at[step_row.step])
        assert after == any(r.section != "layer" and r.start_us >= first for r in rows)
        assert {kind: [layer for layer, _us in members] for kind, members in layer_us.items()} \
            == {kind: [layer for layer, _mix in members] for kind, members in mixes.items()}
        assert list(layer_us) == list(mixes)
        for kind, members in layer_us.items():  # the same compute, summed in another order
            assert [us for _layer, us in members] == pytest.approx([sum(m.values()) for _l, m in mixes[kind]], rel=1e-12)
        got = step_layer_mixes(step_row, {("TP0", step_row.step): rows})
        assert {kind: [(layer, dict(mix)) for layer, mix in members] for kind, members in got.items()} == mixes
    part = RankChecks("TP0", "decode", False)
    _used_steps(part, used, read, None)
    assert (part.busy_us, part.in_layers_us, part.other_us, part.unattributed_us, part.waiting_us) \
        == tuple(expected_sums.values())
    assert (part.routed_us, part.shared_us, part.routed_to_shared) == (expected_routed, expected_shared, expected_ratios)


@pytest.mark.parametrize("seed", range(40))
def test_layer_time_outliers_are_judged_on_each_layers_kernel_sums(seed):
    """SYNTHETIC steps, random, some layers far above the others and some right at the bound: the
    layer-time part (judged from row-order sums, its mixes made only near or above the bound) holds
    the outliers that the check written out plainly finds from each layer's kernel sums."""
    import random
    import statistics

    from analysis.attribution.rows import StepRow
    from analysis.tables.self_check_columns import _used_steps
    from analysis.tables.self_check_parts import RankChecks, foreign_kernels

    rng = random.Random(seed)
    limits = {"max_to_median": 1.5, "slack_us": 20.0}
    used, by_step = [], {}
    for step in range(4):
        rows = _random_step_rows(rng, step, rng.randint(10, 60))
        if rng.random() < 0.5:  # one layer far above
            heavy = rng.randrange(5)
            rows += [KernelRow("run", "TP0", step, "decode", "layer", heavy, 0, "attention", "attn", "big", "big", 7,
                               9.0, rng.uniform(100.0, 400.0), 0.0, "structure")]
        by_step[("TP0", step)] = rows
        used.append(StepRow("run", "TP0", step, "decode", 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, len(rows), 1, 1, "ok", "gap"))
        mixes = _mixes_written_out(rows)
        for kind, members in mixes.items():  # a layer at the bound, or a hair above or below it
            if len(members) >= 3 and rng.random() < 0.7:
                times = [sum(m.values()) for _l, m in members]
                at = limits["max_to_median"] * statistics.median(times) + limits["slack_us"]
                layer, mix = max(members, key=lambda lm: sum(lm[1].values()))
                key = next(iter(mix))
                lift = at + rng.choice([-1e-6, 0.0, 1e-6]) - sum(mix.values())
                if lift > 0:
                    rows.append(KernelRow("run", "TP0", step, "decode", "layer", layer, 0, key[0], key[1], key[2], "x",
                                          7, 9.0, lift, 0.0, "structure"))
    expected_layers, expected = 0, []
    for place, s in enumerate(used):
        for kind, members in _mixes_written_out(by_step[("TP0", s.step)]).items():
            if len(members) < 3:
                continue
            expected_layers += len(members)
            times = [sum(m.values()) for _l, m in members]
            median = statistics.median(times)
            last = max(layer for layer, _m in members)
            for (layer, mix), t in zip(members, times):
                if t > limits["max_to_median"] * median + limits["slack_us"]:
                    others = [m for other, m in members if other != layer]
                    expected.append((("TP0", kind), place, ("TP0", kind, s.step, layer, t, median,
                                                            foreign_kernels(mix, others), layer == last)))
    part = RankChecks("TP0", "decode", False)
    _used_steps(part, used, _read_as_columns([r for s in used for r in by_step[("TP0", s.step)]]), limits)
    assert (part.time_layers, part.time_outliers) == (expected_layers, expected)


def test_layer_time_judges_from_the_kernel_sums_where_a_time_is_negative():
    """SYNTHETIC step: a layer whose kernel times cancel (1e18, 60, -1e18 us: a time no loader makes,
    a table read back may hold). Summed row by row its compute rounds to 0 us; the check's sum per
    kernel gives 60 us, far above the other layers' 5 us: judged from the kernel sums, it is the
    outlier (the row-by-row shortcut holds only for times of 0 us or more)."""
    from analysis.attribution.rows import StepRow
    from analysis.tables.self_check_columns import _used_steps
    from analysis.tables.self_check_parts import RankChecks

    def row(layer: int, kernel: str, busy: float) -> KernelRow:
        return KernelRow("run", "TP0", 0, "decode", "layer", layer, 0, "attention", "attn", kernel, kernel, 7,
                         float(layer), busy, 0.0, "structure")

    rows = [row(0, "a", 1e18), row(0, "b", 60.0), row(0, "a", -1e18), row(1, "a", 5.0), row(2, "a", 5.0),
            KernelRow("run", "TP0", 0, "decode", "post", -1, 0, "other", "lm_head", "h", "h", 7, 9.0, 1.0, 0.0,
                      "structure")]
    step = StepRow("run", "TP0", 0, "decode", 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, len(rows), 3, 3, "ok", "gap")
    part = RankChecks("TP0", "decode", False)
    _used_steps(part, [step], _read_as_columns(rows), {"max_to_median": 1.5, "slack_us": 20.0})
    assert part.time_layers == 3
    assert [(outlier[2][3], outlier[2][4]) for outlier in part.time_outliers] == [(0, 60.0)]
