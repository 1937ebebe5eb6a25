"""analysis/catalog.py: the built-in names the harness lists, and the one check of a reference
(a scenario's signature and model, analyze's --expert-load and --load-records) before any trace is read."""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.catalog import KINDS, check_input, list_builtins
from analysis.errors import AnalysisError

DATA = Path(__file__).resolve().parents[1] / "analysis" / "data"


@pytest.mark.parametrize("kind, folder", [("signature", "signatures"), ("model", "models"), ("hardware", "hardware")])
def test_the_builtins_of_a_kind_are_the_files_shipped(kind, folder):
    assert sorted(list_builtins(kind)) == sorted(p.stem for p in (DATA / folder).glob("*.yaml"))


def test_a_signature_says_its_evidence():
    assert all(line.strip() for line in list_builtins("signature").values())


@pytest.mark.parametrize("kind, ref", [("signature", "generic"), ("model", "deepseek-v3"), ("hardware", "h200"),
                                       ("sol_shapes", "deepseek-v3")])
def test_a_good_reference_loads(kind, ref):
    check_input(kind, ref)


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_reference_is_an_analysis_error_naming_it(kind, tmp_path):
    bad = tmp_path / "not-there.yaml"
    with pytest.raises(AnalysisError, match="not-there"):
        check_input(kind, str(bad))


def test_a_model_without_sol_shapes_is_refused_as_sol_shapes_only():
    check_input("model", "gpt-oss-120b")
    with pytest.raises(AnalysisError):
        check_input("sol_shapes", "gpt-oss-120b")


def test_an_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown input kind"):
        check_input("tokenizer", "x")
    with pytest.raises(ValueError, match="no built-ins"):
        list_builtins("expert_load")


def test_the_step_statistics_are_those_of_their_file_in_its_order():
    statistics = list_builtins("statistic")
    assert list(statistics) == ["mean", "median", "p90"]
    assert statistics["mean"] == "" and "median" in statistics["median"] and "90th" in statistics["p90"]


def test_the_ncu_metrics_are_the_flop_metrics_the_report_reads_in_their_order():
    from analysis.report.ncu import load_metric_config

    metrics = list_builtins("ncu_metric")
    assert list(metrics) == list(load_metric_config().flop_metrics) and metrics
    assert all(line.startswith("flops x ") for line in metrics.values())
