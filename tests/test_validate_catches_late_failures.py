"""`validate` refuses what would fail late or mislabel a run; `metrics` tells a run without a manifest
(incomplete, or running while a live process owns it) from a folder that is not a run."""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys

import pytest

import synthetic_run
from harness.commands import validate
from harness.cli import main
from harness.metrics.run_data import read_run
from harness.metrics.errors import RunDataError
from harness.run_owner import OWNER_FILE, claim, release
from harness.scenario import SCENARIOS_DIR

DEMO = (SCENARIOS_DIR / "demo.yaml").read_text()
SGLANG = (SCENARIOS_DIR / "sglang_single_gpu.yaml").read_text()


def _validate(tmp_path, text: str, capsys) -> tuple[int, str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    status = validate.run(argparse.Namespace(scenario=str(path)))
    captured = capsys.readouterr()
    return status, captured.err + captured.out


@pytest.mark.parametrize("change, says", [
    (lambda t: t.replace("signature: embedded-hf-deepseek-v3-cpu", "signature: no-such-stack"),
     "analysis.signature (line 30): signature no-such-stack: no built-in signature"),
    (lambda t: t.replace("  rank_policy: mean", "  rank_policy: mean\n  model: no-such-model"),
     "analysis.model (line 32): model spec no-such-model"),
    (lambda t: t.replace("model:\n  name: deepseek-v3-tiny\n", ""), "model: missing (required)"),
    (lambda t: t.replace("model:\n  name: deepseek-v3-tiny\n", "model: {}\n"), "model.name: missing (required)"),
    (lambda t: t.replace("name: deepseek-v3-tiny", "name: ''"), "model.name (line 17): String should have at least 1"),
    (lambda t: t.replace("name: deepseek-v3-tiny", "name: '  '"), "model.name (line 17): String should match pattern"),
    (lambda t: t.replace("batch_size: 4", "batch_size: true"), "workload.batch_size (line 19): Input should be a valid integer"),
    (lambda t: t.replace("  input_len: 16\n", "  input_len: 16\n  input_len: 32\n"), "key 'input_len' given twice (lines 20 and 21)"),
    (lambda t: t.replace("outputs:\n  keep_traces: true", "outputs:\n  keep_traces: true\n  trace_prefix: a/b"),
     "outputs.trace_prefix"),
])
def test_validate_refuses_what_a_later_phase_would(tmp_path, capsys, change, says):
    status, out = _validate(tmp_path, change(DEMO), capsys)
    assert status == 1 and says in out, out


def test_validate_refuses_a_batch_the_server_can_never_run(tmp_path, capsys):
    text = SGLANG.replace("max_running_requests: 32", "max_running_requests: 2")
    status, out = _validate(tmp_path, text, capsys)
    assert status == 1 and "exceeds engine.max_running_requests (2)" in out, out


def test_metrics_on_a_folder_that_is_not_a_run_is_an_error(tmp_path, capsys):
    assert main(["metrics", str(tmp_path)]) == 1
    assert "not a run directory" in capsys.readouterr().err
    with pytest.raises(RunDataError, match="not a run directory"):
        read_run(tmp_path)


def test_a_run_without_a_manifest_is_incomplete_unless_a_live_run_owns_it(tmp_path):
    run_dir = synthetic_run.build(tmp_path)
    (run_dir / "manifest.json").unlink()
    assert read_run(run_dir).status == "incomplete"
    claim(run_dir)  # this process: alive
    assert read_run(run_dir).status == "running"
    release(run_dir)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (run_dir / OWNER_FILE).write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    assert read_run(run_dir).status == "incomplete"  # its owner has exited
    assert os.path.exists(run_dir / OWNER_FILE)


@pytest.mark.parametrize("change, says", [
    (lambda t: t.replace("  tp: 1\n", "  tp: 1\n  dp_attention: true\n"), "dp_attention needs dp >= 2"),
    (lambda t: t.replace("  tp: 1\n", "  tp: 1\n  deepep_mode: low_latency\n"),
     "deepep_mode is set but moe_a2a_backend is not 'deepep'"),
    (lambda t: t.replace("  tp: 1\n", "  tp: 1\n  two_batch_overlap: true\n"), "two_batch_overlap needs moe_a2a_backend"),
    (lambda t: t.replace("gpus_per_node: 1", "gpus_per_node: 2"), "tp=1 x pp=1 must equal nodes x gpus_per_node = 2"),
])
def test_validate_builds_the_sglang_plan_the_run_would_refuse(tmp_path, capsys, change, says):
    """The run refused these only in its plan phase, after Ray was connected and a run directory made."""
    status, out = _validate(tmp_path, change(SGLANG), capsys)
    assert status == 1 and says in out and "engine (the SGLang plan)" in out, out


def test_validate_checks_the_plan_for_the_release_named(tmp_path, capsys):
    text = SGLANG.replace("  stages: [DECODE]\n", "  stages: [DECODE]\n  capture_traces: true\n")
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err  # the default release writes them
    capsys.readouterr()
    assert main(["validate", str(path), "--sglang-version", "0.5.13.post1"]) == 1
    assert "capture_traces: SGLang 0.5.13.post1 writes no CUDA-graph capture traces" in capsys.readouterr().err


def test_every_shipped_scenario_still_validates(capsys):
    for path in sorted(SCENARIOS_DIR.glob("*.yaml")):
        assert main(["validate", str(path)]) == 0, (path, capsys.readouterr().err)


def test_run_refuses_a_plan_mistake_before_creating_anything(tmp_path, capsys):
    from harness.run import main as run_main

    path = tmp_path / "scenario.yaml"
    path.write_text(SGLANG.replace("  tp: 1\n", "  tp: 1\n  dp_attention: true\n"))
    runs = tmp_path / "runs"
    assert run_main(["--scenario", str(path), "--runs-dir", str(runs)]) == 2
    assert "dp_attention needs dp >= 2" in capsys.readouterr().err
    assert not runs.exists() or not any(runs.iterdir())
