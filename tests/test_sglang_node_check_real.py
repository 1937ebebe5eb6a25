"""The node check against a real SGLang, where one is installed (a GPU node, or a prepared CPU box).

Set MOE_HARNESS_SGLANG_PYTHON to a Python that imports a real SGLang of a supported release (and, if
it needs one, MOE_HARNESS_SGLANG_PYTHONPATH); without it these tests are skipped. Every scenario,
planned for that release, must pass SGLang's own parser; a planted unknown flag must not.
"""
import os
from pathlib import Path

import pytest
import yaml

from harness.commands.plan import load_deployment_spec, load_deployment_specs
from harness.sglang.node_check import describe, run_node_check
from harness.sglang.plan import build_plan
from harness.sglang.version import supported_versions

REPO = Path(__file__).resolve().parent.parent
PYTHON = os.environ.get("MOE_HARNESS_SGLANG_PYTHON")
ENV = {"PYTHONPATH": os.environ["MOE_HARNESS_SGLANG_PYTHONPATH"]} if os.environ.get("MOE_HARNESS_SGLANG_PYTHONPATH") else {}
SCENARIOS = sorted(p for p in (REPO / "scenarios").glob("*.yaml")
                   if (yaml.safe_load(p.read_text()).get("engine") or {}).get("kind") == "sglang")
pytestmark = pytest.mark.skipif(not PYTHON, reason="MOE_HARNESS_SGLANG_PYTHON (a Python with a real SGLang) not set")


@pytest.fixture(scope="module")
def installed():
    answer = run_node_check(PYTHON, ["--model-path", "m"], ENV)
    assert "error" not in answer, answer.get("error")
    assert answer["sglang_version"] in supported_versions(), answer["sglang_version"]
    return answer["sglang_version"]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_passes_the_installed_sglang(path, installed):
    specs, _, _ = load_deployment_specs(str(path))  # a PD scenario: each role's plan
    for spec in specs.values():
        plan = build_plan(spec, environ={}, version=installed)
        results = {n.node_rank: run_node_check(PYTHON, n.server_args(plan.launcher_len), {**n.env, **ENV})
                   for n in plan.nodes}
        assert describe(results, plan) == []


def test_a_planted_unknown_flag_is_refused_by_the_installed_sglang(installed):
    spec, _ = load_deployment_spec("sglang_single_gpu")
    plan = build_plan(spec, environ={}, version=installed)
    node = plan.nodes[0]
    result = run_node_check(PYTHON, node.server_args(plan.launcher_len) + ["--enable-dp-attn"], {**node.env, **ENV})
    assert [(p["flag"], p["kind"]) for p in result["problems"]] == [("--enable-dp-attn", "unknown")]
