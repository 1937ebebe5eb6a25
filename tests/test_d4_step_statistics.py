"""The D4 column's statistics over steps (mean, median, p90) and its time before and after the layers.

Why: every other fixture's steps are alike, where mean, median, p90 and max are one number and the
time outside the layers is small; a median computed as the mean, a p90 taken as the max, `after
layers` ten times too large or `before` and `after layers` swapped all passed the suite. The SYNTHETIC
fixture (tests/synthetic_step_stats.py) scales every kernel of step k by a known factor, so that each
row's mean, median, p90 and max over steps are four different known numbers (4, 3.5, 6 and 10 times
the row's base time), and before / after the layers are 25 and 320 us times the same factors.
"""
from __future__ import annotations

import csv
from collections import defaultdict

import pytest

from analysis.pipeline import AnalysisOptions, analyze
from harness.cli import main
from synthetic_step_stats import (FACTORS, LAYERS, MEAN, MEDIAN, P90, POST_BASE_US, PRE_BASE_US, STAT_FACTOR,
                                  module_base_us, write_trace)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("step-stats") / "synthetic-step-stats-TP-0-DECODE.trace.json.gz"
    write_trace(path)
    return path


def _column(trace, stat: str):
    """The D4 column of the fixture with the statistic `stat`, every step found whole and used."""
    result = analyze([str(trace)], options=AnalysisOptions(layers=LAYERS, stat=stat))
    assert [(s.layers_found, s.status) for s in result.step_rows] == [(LAYERS, "ok")] * len(FACTORS)
    assert result.d4.steps_used == len(FACTORS)
    return result.d4


def _by_module(rows, field: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = defaultdict(float)
    for r in rows:
        out[(r.group, r.module)] += r.value_us if field == "value_us" else r.stats_us[field.removesuffix("_us")]
    return dict(out)


def _expected(factor: float) -> dict[tuple[str, str], float]:
    return {key: base * factor for key, base in module_base_us().items()}


def test_each_row_reports_its_median_and_p90_over_steps_not_the_mean_and_max(trace):
    """A row's median_us is 3.5 x its base (the mean would give 4x), its p90_us 6x (the max, 10x)."""
    d4 = _column(trace, "mean")
    assert _by_module(d4.rows, "value_us") == pytest.approx(_expected(MEAN))
    assert _by_module(d4.rows, "median_us") == pytest.approx(_expected(MEDIAN))
    assert _by_module(d4.rows, "p90_us") == pytest.approx(_expected(P90))


def test_before_and_after_layers_are_the_steps_own_times_outside_the_layers(trace):
    """Before the layers: the embedding, 25 us x the mean factor 4 = 0.1 ms; after them: the final
    norm, the LM head and the argmax, 320 us x 4 = 1.28 ms. Distinct, so a swap shows."""
    d4 = _column(trace, "mean")
    assert d4.pre_ms == pytest.approx(PRE_BASE_US * MEAN / 1000)
    assert d4.post_ms == pytest.approx(POST_BASE_US * MEAN / 1000)


@pytest.mark.parametrize("stat", ["median", "p90"])
def test_the_columns_statistic_rules_its_rows_and_the_time_outside_the_layers(trace, stat):
    """`--stat median` / `--stat p90`: every row's value and before / after layers are that statistic
    of the steps (3.5x / 6x), and each row still reports its median and p90 beside it."""
    d4 = _column(trace, stat)
    factor = STAT_FACTOR[stat]
    assert _by_module(d4.rows, "value_us") == pytest.approx(_expected(factor))
    assert d4.pre_ms == pytest.approx(PRE_BASE_US * factor / 1000)
    assert d4.post_ms == pytest.approx(POST_BASE_US * factor / 1000)
    assert _by_module(d4.rows, "median_us") == pytest.approx(_expected(MEDIAN))
    assert _by_module(d4.rows, "p90_us") == pytest.approx(_expected(P90))


def test_the_written_table_and_detail_carry_them(trace, tmp_path):
    """What a user reads: d4.csv's before / after layers lines and d4_detail.csv's median_us / p90_us."""
    out = tmp_path / "out"
    assert main(["analyze", str(trace), "--layers", str(LAYERS), "--out", str(out)]) == 0
    with (out / "d4.csv").open() as fh:
        lines = {row[0]: row[-1] for row in csv.reader(fh) if row}
    assert (lines["before layers (ms)"], lines["after layers (ms)"]) == ("0.10ms", "1.28ms")
    with (out / "d4_detail.csv").open() as fh:
        detail = list(csv.DictReader(fh))
    core = next(r for r in detail if r["module"] == "attn_core" and r["kernel"].startswith("paged_attention_ll4mi_QKV"))
    # the attention core kernel: 20 us x (mean 4, median 3.5, p90 6)
    assert (core["value_us"], core["median_us"], core["p90_us"]) == ("80.000", "70.000", "120.000")


def test_a_new_statistic_is_one_entry_in_the_statistics_file(trace, tmp_path):
    """docs/architecture.md's claim that a p99 column touches one data file (and its docs row): in a copy
    of the packages, one entry `max` (the quantile q = 1) added to step_statistics.yaml and nothing
    else gives `--stat max`, a max_us column in d4_detail.csv and the export schema, and analysis.json
    rows that `compare` reads back with it. The attention core kernel: 20 us x the largest factor 10."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    copy = tmp_path / "copy"
    for package in ("analysis", "harness"):
        shutil.copytree(repo / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    stats_file = copy / "analysis" / "data" / "tables" / "step_statistics.yaml"
    stats_file.write_text(stats_file.read_text() + '  max: {how: quantile, q: 1.0, column: "As value_us with the '
                                                   'largest over steps"}\n')
    env = dict(os.environ, PYTHONPATH=str(copy))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "harness.cli", "analyze", str(trace), "--layers", str(LAYERS),
                          "--stat", "max", "--out", str(out)], env=env, cwd=copy, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    with (out / "d4_detail.csv").open() as fh:
        detail = list(csv.DictReader(fh))
    core = next(r for r in detail if r["module"] == "attn_core" and r["kernel"].startswith("paged_attention_ll4mi_QKV"))
    assert (core["value_us"], core["median_us"], core["p90_us"], core["max_us"]) == ("200.000", "70.000", "120.000",
                                                                                     "200.000")
    probe = ("import sys; from harness.exports.tables import load_schema; from analysis.pipeline import load_column; "
             "print([c.name for c in load_schema()[1]['d4'].columns if c.name.endswith('_us')]); "
             "print(max(r.stats_us['max'] for r in load_column(sys.argv[1]).rows))")
    seen = subprocess.run([sys.executable, "-c", probe, str(out)], env=env, cwd=copy, capture_output=True, text=True, timeout=120)
    assert seen.returncode == 0, seen.stderr
    columns, saved_max = seen.stdout.splitlines()
    assert columns == "['value_us', 'median_us', 'p90_us', 'max_us', 'exposed_us']"
    assert float(saved_max) == pytest.approx(max(float(r["max_us"]) for r in detail if r["group"] != "mtp"))
