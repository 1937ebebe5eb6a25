"""`compare` says what changed: the per-step spread, the noise rule and its verdicts.

Known answers first (SYNTHETIC traces whose every duration is known, and hand-made columns at the
edges of the rule), then the bundled real runs: two runs of one deployment (mostly within noise)
and two deployments (the expert GEMM rows changed), with numbers that match each run's own table.
"""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest

from analysis.pipeline import AnalysisOptions, analyze, load_column, write_outputs
from analysis.attribution.signature import load_signature
from analysis.errors import AnalysisError
from analysis.tables.d4 import D4Column
from analysis.tables.d4_cells import D4Row, same_stats
from analysis.tables.d4_diff import CHANGED, NO_SPREAD, WITHIN_NOISE, NoiseRule, changes_config, diff_columns
from harness.cli import main
from synthetic_comm import write_ep_ranks
from synthetic_deepseek import write_rank_trace

ROOT = Path(__file__).resolve().parents[1]
RAY_RUNS = ROOT / "tests/data/sglang-real/ray-run"
SAME_A = RAY_RUNS / "sglang_dsv3_4l_1gpu-20261124-204402"
SAME_B = RAY_RUNS / "sglang_dsv3_4l_1gpu_full-20261124-214640"
REAL = ROOT / "tests/data/sglang-real"
DEEPGEMM = REAL / "sglang-0.5.17-dsv3-4l-fp8-h200-deepgemm-moe-TP-0-DECODE.trace.json.gz"
FUSED = REAL / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"
RULE = NoiseRule(spread_multiple=3.0, min_relative_change=0.01)


def _column(name: str, rows: list[D4Row], step_ms: float = 1.0, step_sd_ms: float | None = 0.01, **kw) -> D4Column:
    return D4Column(name=name, stage="decode", stat="mean", rank_policy="mean", step_ms=step_ms, layers_ms=1.0,
                    num_layers=4, pre_ms=0.0, post_ms=0.0, rows=rows, step_sd_ms=step_sd_ms, **kw)


def _row(module: str, value: float, sd: float | None, layers: float = 1.0, group: str = "moe") -> D4Row:
    return D4Row(group, module, "k", value, value, layers, same_stats(value), step_sd_us=sd)


def _verdicts(changes) -> dict[str, str]:
    return {c.module: c.verdict for c in changes.rows}


# ---------------------------------------------------------------- the rule, on columns with known answers


def test_the_rule_at_its_edges():
    """3 x the combined spread and 1% of the larger value: just inside and just outside each."""
    sd = 0.3  # combined spread sqrt(0.3^2 + 0.4^2) = 0.5, band 1.5 us
    base = _column("a", [_row("inside", 100.0, sd), _row("outside", 100.0, sd), _row("flat_small", 50.0, 0.0),
                         _row("flat_big", 50.0, 0.0), _row("unknown", 10.0, None)])
    other = _column("b", [_row("inside", 101.49, 0.4), _row("outside", 98.49, 0.4), _row("flat_small", 50.49, 0.0),
                          _row("flat_big", 50.51, 0.0), _row("unknown", 30.0, 0.1)])
    changes = diff_columns(base, other, RULE)
    assert _verdicts(changes) == {"inside": WITHIN_NOISE, "outside": CHANGED, "flat_small": WITHIN_NOISE,
                                  "flat_big": CHANGED, "unknown": NO_SPREAD}
    inside = next(c for c in changes.rows if c.module == "inside")
    assert inside.band_us == pytest.approx(1.5) and inside.diff_us == pytest.approx(1.49)
    assert next(c for c in changes.rows if c.module == "flat_big").band_us == pytest.approx(0.5051)


def test_rows_rank_by_their_effect_on_the_step_and_a_missing_row_is_zero():
    """Effect = value x layers: a small per-layer change on 58 layers outranks a larger one on 3."""
    base = _column("a", [_row("dense_mlp", 100.0, 0.1, layers=3), _row("experts", 50.0, 0.1, layers=58),
                         _row("gone", 5.0, 0.1, layers=58)])
    other = _column("b", [_row("dense_mlp", 110.0, 0.1, layers=3), _row("experts", 51.0, 0.1, layers=58),
                          _row("new", 2.0, 0.1, layers=58, group="combine/share overlap")])
    changes = diff_columns(base, other, RULE)
    assert [c.module for c in changes.rows] == ["gone", "new", "experts", "dense_mlp"]
    assert [round(c.effect_us, 6) for c in changes.rows] == [-290.0, 116.0, 58.0, 30.0]
    gone, new = changes.rows[0], changes.rows[1]
    assert (gone.base_us, gone.other_us, gone.other_sd_us, gone.verdict) == (5.0, None, 0.0, CHANGED)
    assert (new.base_us, new.other_us, new.base_sd_us, new.verdict) == (None, 2.0, 0.0, CHANGED)


def test_mtp_and_wait_transfer_rows_take_part():
    base = _column("a", [_row("experts", 50.0, 0.1)],
                   mtp_rows=[D4Row("mtp", "draft layer", "per draft step", 200.0, 200.0, 3.0, same_stats(200.0), step_sd_us=1.0)],
                   comm_rows=[D4Row("wait / transfer", "dispatch", "wait", 40.0, 40.0, 3.0, same_stats(40.0), step_sd_us=2.0)])
    other = _column("b", [_row("experts", 50.0, 0.1)],
                    mtp_rows=[D4Row("mtp", "draft layer", "per draft step", 150.0, 150.0, 3.0, same_stats(150.0), step_sd_us=1.0)],
                    comm_rows=[D4Row("wait / transfer", "dispatch", "wait", 41.0, 41.0, 3.0, same_stats(41.0), step_sd_us=2.0)])
    changes = diff_columns(base, other, RULE)
    assert [(c.group, c.module, c.kernel, c.verdict) for c in changes.rows] == [
        ("mtp", "draft layer", "per draft step", CHANGED), ("wait / transfer", "dispatch", "wait", WITHIN_NOISE),
        ("moe", "experts", "k", WITHIN_NOISE)]


def test_a_column_saved_without_spreads_gets_no_verdict():
    old = _column("old", [_row("experts", 50.0, None)], step_sd_ms=None)
    new = _column("new", [_row("experts", 80.0, 0.1), _row("added", 80.0, 0.1)])
    changes = diff_columns(old, new, RULE)
    assert {c.verdict for c in changes.rows} == {NO_SPREAD} and changes.step.verdict == NO_SPREAD


def test_the_rule_file_is_checked(tmp_path):
    bad = tmp_path / "changes.yaml"
    bad.write_text("noise: {spread_multiple: -1, min_relative_change: 0.01}\nlabels: {}\n")
    with pytest.raises(AnalysisError, match=str(bad)):
        changes_config(bad)
    assert changes_config().noise == RULE  # docs/analysis.md states these two numbers


# ---------------------------------------------------------------- spreads measured on traces with known durations


def test_the_spread_is_each_rows_standard_deviation_over_steps(tmp_path):
    """SYNTHETIC: step s runs every kernel (1 + 0.25 s) times as long, so each row's spread is known."""
    sig = load_signature("sglang-sm90-deepep-ll")
    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    expected = write_rank_trace(path, sig, steps=4, mtp_draft_steps=2)
    d4 = analyze([str(path)], signature=sig.source, model="deepseek-v3").d4
    assert d4.stage == "target_verify" and d4.rows and d4.mtp_rows
    for row in d4.rows:
        samples = expected.per_layer_us[(row.group, row.module, row.kernel)]
        assert len(samples) == 4
        assert row.step_sd_us == pytest.approx(statistics.stdev(samples), abs=1e-6), row
    draft = next(r for r in d4.mtp_rows if r.module == "draft layer")
    assert draft.step_sd_us == pytest.approx(statistics.stdev(expected.draft_step_us), abs=1e-6)
    assert d4.step_sd_ms == pytest.approx(statistics.stdev(expected.step_us) / 1000, abs=1e-9)


def test_one_step_has_no_spread(tmp_path):
    sig = load_signature("sglang-sm90-deepep-ll")
    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    write_rank_trace(path, sig, num_layers=4, dense_layers=1, steps=1)
    d4 = analyze([str(path)], signature=sig.source).d4
    assert {r.step_sd_us for r in d4.rows} == {None} and d4.step_sd_ms is None


def _ep_column(folder: Path, name: str, **kw) -> D4Column:
    folder.mkdir()
    injected = write_ep_ranks(folder, steps=5, jitter_us=1.0, **kw)
    return analyze([str(p) for p in injected.paths], signature="sglang-sm90-deepep-ll",
                   options=AnalysisOptions(run=name)).d4


def test_a_slower_rank_shows_as_changed_wait_rows_and_jitter_does_not(tmp_path):
    """SYNTHETIC two ranks: the same deployment with other jitter is within noise everywhere; a top-k
    300 us slower on one rank in one of the three MoE layers changes top-k and the other rank's
    dispatch wait (each 300 us / 3 MoE layers / 2 ranks = +50 us per layer, rank policy mean),
    nothing of the expert GEMMs or the combine."""
    a = _ep_column(tmp_path / "a", "a", seed=1, delay_us=0.0)
    a2 = _ep_column(tmp_path / "a2", "a2", seed=2, delay_us=0.0)
    slow = _ep_column(tmp_path / "slow", "slow", seed=3, delay_us=300.0)
    same = diff_columns(a, a2)
    assert same.count(CHANGED) == 0 and same.count(WITHIN_NOISE) == len(same.rows) > 10
    moved = diff_columns(a, slow)
    verdicts = {(c.group, c.module, c.kernel): c for c in moved.rows}
    topk = [c for key, c in verdicts.items() if key[1] == "topk"]
    assert len(topk) == 1 and topk[0].verdict == CHANGED and topk[0].diff_us == pytest.approx(50.0, abs=1.0)
    wait = verdicts[("wait / transfer", "dispatch", "wait")]
    assert wait.verdict == CHANGED and wait.diff_us == pytest.approx(50.0, abs=2.0)
    assert verdicts[("wait / transfer", "combine", "wait")].verdict == WITHIN_NOISE
    assert all(c.verdict == WITHIN_NOISE for key, c in verdicts.items() if key[1] in ("up_gate_gemm", "down_gemm"))
    assert moved.rows[0] is topk[0]  # the largest effect on the step comes first


# ---------------------------------------------------------------- an older analysis: spreads derived from its kernels


def _strip_spreads(analysis_dir: Path) -> None:
    """Make analysis.json look like one written before spreads were recorded."""
    path = analysis_dir / "analysis.json"
    doc = json.loads(path.read_text())
    d4 = doc["d4"]
    d4.pop("step_sd_ms", None)
    for key in ("rows", "mtp_rows", "comm_rows"):
        for row in d4.get(key, []):
            row.pop("step_sd_us", None)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("table", ["kernels_long.parquet", "kernels_long.csv"])
def test_an_older_analysis_gets_its_spreads_from_its_kernel_table(tmp_path, capsys, table):
    """From the Parquet kernel table, and from the kernels_long.csv of an analysis written before it."""
    from kernel_tables import as_older_analysis

    result = analyze([str(FUSED)], options=AnalysisOptions(run="fused"))
    write_outputs(result, tmp_path / "fused")
    if table == "kernels_long.csv":
        as_older_analysis(tmp_path / "fused")
    _strip_spreads(tmp_path / "fused")
    assert load_column(tmp_path / "fused").step_sd_ms is None
    assert main(["compare", f"old={tmp_path / 'fused'}", f"new={FUSED}", "--out", str(tmp_path / "cmp")]) == 0
    rows = list(csv.DictReader((tmp_path / "cmp" / "changes.csv").open()))
    fresh = {(r.group, r.module, r.kernel): r.step_sd_us for r in result.d4.rows}
    assert len(rows) == len(result.d4.rows) + 1
    for r in rows[1:]:
        assert float(r["base_sd_us"]) == pytest.approx(fresh[(r["group"], r["module"], r["kernel"])], rel=1e-9)
        assert float(r["diff_us"]) == 0.0 and r["verdict"] == WITHIN_NOISE


def test_without_kernels_an_older_analysis_is_compared_without_verdicts(tmp_path, capsys):
    result = analyze([str(FUSED)], options=AnalysisOptions(run="fused"))
    write_outputs(result, tmp_path / "fused")
    _strip_spreads(tmp_path / "fused")
    (tmp_path / "fused" / "kernels_long.parquet").unlink()
    assert main(["compare", f"old={tmp_path / 'fused'}", f"new={FUSED}"]) == 0
    captured = capsys.readouterr()
    assert "no kernel table (kernels_long.parquet) and no traces/: no per-kernel timing or per-step spread" in \
        captured.err
    assert f"0 of {len(result.d4.rows)} rows changed, 0 within noise, {len(result.d4.rows)} without a spread" in captured.out


# ---------------------------------------------------------------- the bundled real runs


def _table(path: Path) -> dict[tuple[str, str, str], str]:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    # us rows only: expert load is tokens, the step-time rows (where the step goes) are ms per step
    return {(r[0], r[1], r[2]): r[3] for r in rows[1:] if r[2] and r[0] != "expert load" and not r[3].endswith("ms")}


def _compare(tmp_path: Path, *columns: str) -> list[dict]:
    assert main(["compare", *columns, "--out", str(tmp_path / "cmp")]) == 0
    with open(tmp_path / "cmp" / "changes.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_two_runs_of_one_deployment_are_mostly_within_noise(tmp_path, capsys):
    """The bundled run directories (one H100, same scenario; the second with the expert-distribution
    recorder on): their analysis.json predates spreads, so each run's trace is analysed again."""
    rows = _compare(tmp_path, f"A={SAME_A}", f"B={SAME_B}")
    step, rows = rows[0], rows[1:]
    assert step["group"] == "end-to-end" and step["verdict"] == WITHIN_NOISE
    within = [r for r in rows if r["verdict"] == WITHIN_NOISE]
    assert len(within) > len(rows) / 2 and not any(r["verdict"] == NO_SPREAD for r in rows)
    assert all(r["verdict"] == WITHIN_NOISE for r in rows if r["group"] == "attention")
    # numbers as each run's own table has them (d4.csv cells, one decimal)
    for run, side in ((SAME_A, "base_us"), (SAME_B, "other_us")):
        table = _table(run / "analysis" / "d4.csv")
        shown = {(r["group"], r["module"], r["kernel"]): r[side] for r in rows if r[side]}
        assert len(shown) == len(table)
        assert all(f"{float(v):.1f}" == table[key] for key, v in shown.items())
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert "What changed: B against A" in text and f"{len(within)} within noise" in text


def test_two_deployments_name_the_expert_gemms_as_changed(tmp_path, capsys):
    """DeepGEMM's grouped expert GEMMs against Triton's fused_moe_kernel, same H200 and model
    (tests/data/README.md): the expert GEMM rows lead the list, changed; attention stays in noise."""
    for name, path in (("deepgemm", DEEPGEMM), ("fused", FUSED)):
        assert main(["analyze", str(path), "--name", name, "--out", str(tmp_path / name)]) == 0
    rows = _compare(tmp_path, f"deepgemm={tmp_path / 'deepgemm'}", f"fused={tmp_path / 'fused'}")[1:]
    top = [(r["group"], r["module"], r["kernel"].partition("<")[0], r["verdict"]) for r in rows[:4]]  # whole names: by kernel
    assert top == [("moe", "up_gate_gemm", "deep_gemm::sm90_fp8_gemm_1d2d_impl", CHANGED),
                   ("moe", "down_gemm", "deep_gemm::sm90_fp8_gemm_1d2d_impl", CHANGED),
                   ("moe", "up_gate_gemm", "fused_moe_kernel", CHANGED),
                   ("moe", "down_gemm", "fused_moe_kernel", CHANGED)]
    attention = [r for r in rows if r["group"] == "attention"]
    assert sum(r["verdict"] == WITHIN_NOISE for r in attention) > len(attention) / 2
    for name, side in (("deepgemm", "base_us"), ("fused", "other_us")):
        table = _table(tmp_path / name / "d4.csv")
        shown = {(r["group"], r["module"], r["kernel"]): r[side] for r in rows if r[side]}
        assert shown.keys() == table.keys()
        assert all(f"{float(v):.1f}" == table[key] for key, v in shown.items())
        assert all(math.isfinite(float(r["effect_us"])) for r in rows)
