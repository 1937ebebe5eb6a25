"""The SGLang metric names the dashboard may query exist in the collectors of the releases they list."""
from pathlib import Path

import pytest
import yaml

from harness.sglang.version import supported_versions
from harness.sglang.wheel_source import metric_names

REPO = Path(__file__).resolve().parent.parent
LISTED = yaml.safe_load((REPO / "cluster" / "monitoring" / "sglang_metrics.yaml").read_text())["metrics"]


@pytest.mark.parametrize("version", supported_versions())
def test_listed_names_are_registered_by_each_release(version, sglang_sources):
    registered = metric_names(version)
    missing = [m["name"] for m in LISTED if version in m.get("releases", supported_versions())
               and m["name"] not in registered]
    assert not missing, f"not in SGLang {version}'s metrics_collector.py: {missing}"


def test_per_request_tpot_has_0523s_name(sglang_sources):
    names = {m["name"] for m in LISTED}
    assert "sglang:request_time_per_output_token_seconds" in names and "sglang:time_per_output_token_seconds" not in names
    assert "sglang:request_time_per_output_token_seconds" in metric_names("0.5.23")
    assert not any("time_per_output_token" in n for n in metric_names("0.5.17") | metric_names("0.5.13.post1"))


def test_a_name_listed_for_some_releases_is_registered_by_exactly_those(sglang_sources):
    for m in (m for m in LISTED if "releases" in m):
        registering = [v for v in supported_versions() if m["name"] in metric_names(v)]
        assert sorted(m["releases"]) == sorted(registering), m["name"]
