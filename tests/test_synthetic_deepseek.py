"""The analysis reproduces the known numbers of SYNTHETIC DeepSeek-V3 traces exactly.

Arithmetic only (tests/synthetic_deepseek.py): the traces are written from the signatures under
test, so these tests check sums, rank statistics, exposed time and MTP per token, not whether the
signatures name a real stack's kernels right (no real trace confirms them: test_signature_evidence.py).
"""
import statistics

import pytest

from analysis.pipeline import AnalysisOptions, analyze
from analysis.errors import AnalysisError
from analysis.attribution.signature import load_signature
from synthetic_deepseek import write_rank_trace

SIGNATURES = ["sglang-sm90-deepep-ll", "sglang-sm100-deepep-ll", "dpsk-h800"]


def _check_rows(d4, expected_by_rank, policy="mean"):
    assert d4.rows, "no D4 rows"
    for row in d4.rows:
        key = (row.group, row.module, row.kernel)
        per_rank = [statistics.fmean(exp.per_layer_us[key]) for exp in expected_by_rank]
        per_rank_exposed = [statistics.fmean(exp.exposed_us[key]) for exp in expected_by_rank]
        combine = max if policy == "max" else statistics.fmean
        assert row.value_us == pytest.approx(combine(per_rank), abs=1e-6), key
        assert row.exposed_us == pytest.approx(combine(per_rank_exposed), abs=1e-6), key
    expected_keys = set(expected_by_rank[0].per_layer_us)
    assert {(r.group, r.module, r.kernel) for r in d4.rows} == expected_keys


@pytest.mark.parametrize("name", SIGNATURES)
def test_single_rank_reproduces_known_numbers(tmp_path, name):
    sig = load_signature(name)
    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    expected = write_rank_trace(path, sig, steps=2)
    result = analyze([str(path)], signature=name, model="deepseek-v3")
    assert [s.layers_found for s in result.step_rows] == [61, 61]
    assert all(s.status == "ok" for s in result.step_rows)
    assert not any(r.group == "unattributed" for r in result.kernel_rows)
    _check_rows(result.d4, [expected])
    assert result.d4.step_ms == pytest.approx(statistics.fmean(expected.step_us) / 1000, abs=1e-9)
    assert result.d4.layers_ms == pytest.approx(statistics.fmean(expected.layers_us) / 1000, abs=1e-9)
    assert result.d4.num_layers == 61


def test_shared_experts_hide_under_combine(tmp_path):
    sig = load_signature("sglang-sm90-deepep-ll")
    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    write_rank_trace(path, sig, steps=1)
    result = analyze([str(path)], signature=sig.source, model="deepseek-v3")
    rows = {(r.group, r.module): r for r in result.d4.rows}
    shared = [r for r in result.d4.rows if r.group == "combine/share overlap"]
    assert shared and all(r.exposed_us == 0 for r in shared)
    combine = rows[("moe", "combine")]
    assert combine.exposed_us == pytest.approx(combine.value_us - sum(r.value_us for r in shared), abs=1e-6)


def test_two_batch_overlap_doubles_anchors(tmp_path):
    sig = load_signature("dpsk-h800")
    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    expected = write_rank_trace(path, sig, steps=2, tbo=True)
    without = analyze([str(path)], signature="dpsk-h800", model="deepseek-v3")
    assert all(s.status == "layer_count_mismatch" for s in without.step_rows), "122 anchors must not pass as 61 layers"
    assert without.d4.steps_mismatched == 2  # flagged in the table's notes; --strict leaves them out
    with pytest.raises(AnalysisError, match=r"--strict left out all 2 decode steps.*found 122, expected 61"):
        analyze([str(path)], signature="dpsk-h800", model="deepseek-v3", options=AnalysisOptions(strict=True))
    result = analyze([str(path)], signature="dpsk-h800", model="deepseek-v3", options=AnalysisOptions(tbo=True))
    assert [s.layers_found for s in result.step_rows] == [61, 61]
    assert {r.micro_batch for r in result.kernel_rows if r.section == "layer"} == {0, 1}
    _check_rows(result.d4, [expected])


def test_mtp_group_and_time_per_accepted_token(tmp_path):
    sig = load_signature("sglang-sm100-deepep-ll")
    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    expected = write_rank_trace(path, sig, steps=2, mtp_draft_steps=2)
    result = analyze([str(path)], signature="sglang-sm100-deepep-ll", model="deepseek-v3",
                     options=AnalysisOptions(accept_length=2.5))
    stages = [s.stage for s in result.step_rows]
    assert stages == ["draft", "draft", "target_verify", "draft_extend"] * 2
    d4 = result.d4
    assert d4.stage == "target_verify"
    _check_rows(d4, [expected])
    mtp = {r.module: r for r in d4.mtp_rows}
    draft = statistics.fmean(expected.draft_step_us)
    extend = statistics.fmean(expected.draft_extend_us)
    assert mtp["draft layer"].value_us == pytest.approx(draft)
    assert mtp["draft layer"].layers == 2  # draft steps per verify
    assert mtp["draft extend"].value_us == pytest.approx(extend)
    assert mtp["tree / sampling"].value_us == pytest.approx(statistics.fmean(expected.tree_us))
    iteration_ms = (statistics.fmean(expected.step_us) + 2 * draft + extend) / 1000
    assert d4.step_ms == pytest.approx(iteration_ms)
    assert d4.per_token_ms == pytest.approx(iteration_ms / 2.5)


def test_mtp_with_the_labels_of_sglang_0_5_23(tmp_path):
    """0.5.23 writes step[VERIFY ...] and step[DRAFT ...] (the draft extend too): the same verify
    table as with 0.5.17's labels, the draft extend told apart as the first DRAFT after a verify."""
    sig = load_signature("sglang-sm100-deepep-ll")
    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    expected = write_rank_trace(path, sig, steps=2, mtp_draft_steps=2, labels="0.5.23")
    result = analyze([str(path)], signature="sglang-sm100-deepep-ll", model="deepseek-v3")
    assert [s.stage for s in result.step_rows] == ["draft", "draft", "target_verify", "draft_extend"] * 2
    d4 = result.d4
    assert d4.stage == "target_verify" and d4.steps_used == 2
    _check_rows(d4, [expected])
    mtp = {r.module: r for r in d4.mtp_rows}
    assert mtp["draft layer"].value_us == pytest.approx(statistics.fmean(expected.draft_step_us))
    assert mtp["draft extend"].value_us == pytest.approx(statistics.fmean(expected.draft_extend_us))
    iteration_ms = (statistics.fmean(expected.step_us) + 2 * statistics.fmean(expected.draft_step_us)
                    + statistics.fmean(expected.draft_extend_us)) / 1000
    assert d4.step_ms == pytest.approx(iteration_ms)
    assert [c.verdict for c in result.checks if c.check == "stage_labels"] == ["pass"]


@pytest.mark.parametrize("policy", ["mean", "max"])
def test_ranks_with_a_straggler(tmp_path, policy):
    sig = load_signature("sglang-sm90-deepep-ll")
    scales = [1.0, 1.0, 1.0, 1.5]
    paths, expected = [], []
    for rank, scale in enumerate(scales):
        path = tmp_path / f"run-TP-{rank}-DP-{rank}-EP-{rank}-DECODE.trace.json.gz"
        expected.append(write_rank_trace(path, sig, steps=2, scale=scale, clock_us=3.0 * rank))
        paths.append(str(path))
    result = analyze(paths, signature="sglang-sm90-deepep-ll", model="deepseek-v3",
                     options=AnalysisOptions(rank_policy=policy, jobs=2))
    assert result.d4.ranks == ["TP0-DP0-EP0", "TP1-DP1-EP1", "TP2-DP2-EP2", "TP3-DP3-EP3"]
    _check_rows(result.d4, expected, policy)
    assert result.d4.straggler == "TP3-DP3-EP3"
    rank_ms = [statistics.fmean(exp.step_us) / 1000 for exp in expected]
    spread = 100 * (max(rank_ms) - min(rank_ms)) / statistics.median(rank_ms)
    assert result.d4.rank_spread_pct == pytest.approx(spread, rel=1e-9)
    assert result.d4.rank_step_ms["TP3-DP3-EP3"] == pytest.approx(rank_ms[3], rel=1e-9)
    named = analyze(paths, signature="sglang-sm90-deepep-ll", model="deepseek-v3",
                    options=AnalysisOptions(rank_policy="rank:TP3-DP3-EP3", jobs=1))
    _check_rows(named.d4, [expected[3]])


@pytest.mark.parametrize("signame", ["sglang-sm90-deepep-ll", "sglang-sm100-deepep-ll", "dpsk-h800"])
def test_structure_without_the_signature_finds_the_same_layers_and_groups(signame, tmp_path):
    """SYNTHETIC fixtures (kernel names from the signature's examples): the structural attribution
    never reads the signature, so these are a check of it on DeepEP / DeepGEMM / FlashMLA-shaped
    kernel sequences, not of the signature: 3 dense + 58 MoE layers, groups within 3 points."""
    from analysis.attribution.rank.agreement import shares

    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    write_rank_trace(path, load_signature(signame), steps=1)
    by_signature = analyze([str(path)], signature=signame, model="deepseek-v3")
    by_structure = analyze([str(path)], model="deepseek-v3")
    step = by_structure.step_rows[0]
    assert (step.layers_found, step.moe_layers_found, step.status) == (61, 58, "ok"), step.note

    a = shares(by_signature.kernel_rows, by_signature.step_rows).groups
    b = shares(by_structure.kernel_rows, by_structure.step_rows).groups
    assert all(abs(a.get(g, 0) - b.get(g, 0)) <= 3.0 for g in set(a) | set(b)), (a, b)
