"""Secrets are masked by value, not by the look of their names: a passthrough variable with a plain
name, a password in a URL and the value of a secret flag never reach a plan, a manifest, a copied
scenario, a server log or the console (the full run is in tests/test_run_sglang.py)."""
from __future__ import annotations

import sys

import pytest
import yaml

import slow_http
import synthetic_run
from harness.cli import main
from harness.node.process import ServerProcess
from harness.scenario import parse_scenario, scenario_to_yaml
from harness.sglang.plan import DeploymentSpec, build_plan

PLAIN = "plain-passthrough-value-4711"  # a passthrough variable whose name looks like nothing secret
FLAG = "sk-flag-secret-0815"
PASSWORD = "pw-in-url-2024"


def _plan():
    spec = DeploymentSpec(model_path="m", nodes=1, gpus_per_node=1, passthrough_env=("HF_TOKEN", "MODEL_ACCESS"),
                          env={"MIRROR": f"https://user:{PASSWORD}@mirror.example/models"},
                          extra_args=("--api-key", FLAG))
    return build_plan(spec, environ={"MODEL_ACCESS": PLAIN, "HF_TOKEN": "hf_token_value_99"})


def test_the_plan_and_its_manifest_entry_mask_every_secret_by_value():
    plan = _plan()
    assert plan.nodes[0].env["MODEL_ACCESS"] == PLAIN  # it still reaches the server
    shown = plan.render() + yaml.safe_dump(plan.to_manifest())
    for secret in (PLAIN, FLAG, PASSWORD, "hf_token_value_99"):
        assert secret not in shown, secret
    assert "export MODEL_ACCESS='***'" in shown and "https://***@mirror.example/models" in shown


def test_a_server_log_masks_a_plain_named_passthrough_value(tmp_path):
    plan = _plan()
    log = tmp_path / "server.log"
    script = "import os; print('token', os.environ['MODEL_ACCESS'], 'and key', os.environ.get('K'))"
    launch = plan.nodes[0]
    server = ServerProcess([sys.executable, "-c", script], dict(launch.env, K=FLAG), str(log),
                           secrets=launch.secrets)
    server.start()
    server.proc.wait(timeout=30)
    server.stop()
    text = log.read_text()
    assert "token *** and key ***" in text and PLAIN not in text and FLAG not in text


def test_the_run_directorys_scenario_copy_masks_secret_flags_and_url_credentials(tmp_path):
    source = (f"name: s\ncluster: {{nodes: 1, gpus_per_node: 1}}\nengine:\n  kind: sglang\n"
              f"  model_path: https://me:{PASSWORD}@hub.example/m\n  extra_args: [--api-key, {FLAG}]\n"
              f"model: {{name: m}}\nworkload: {{output_len: 64}}\n")
    scenario = parse_scenario(source, "s.yaml")
    text = scenario_to_yaml(scenario)
    assert FLAG not in text and PASSWORD not in text
    assert "--api-key" in text and "https://***@hub.example/m" in text


def test_validate_never_prints_url_credentials(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ncluster: {{nodes: 1, gpus_per_node: 1}}\nengine:\n  kind: sglang\n"
                    f"  model_path: https://me:{PASSWORD}@hub.example/m\nmodel: {{name: m}}\nworkload: {{output_len: 64}}\n")
    assert main(["validate", str(path)]) == 0
    assert PASSWORD not in capsys.readouterr().out


@pytest.fixture
def dribbling_server():
    with slow_http.dribbling_server() as address:
        yield address


@pytest.mark.timeout(60)
def test_a_slow_pushgateway_is_given_up_at_the_push_deadline(tmp_path, dribbling_server, monkeypatch, capsys, caplog):
    """Each byte arrives well within any per-read timeout: only a total deadline ends the push."""
    import harness.metrics.push as push

    monkeypatch.setattr(push, "PUSH_DEADLINE_S", 3.0, raising=False)
    run_dir = synthetic_run.build(tmp_path)
    assert main(["metrics", str(run_dir), "--quiet", "--pushgateway", dribbling_server]) == 0
    said = capsys.readouterr().err + caplog.text
    assert "did not answer in time" in said and "no complete answer within 3 s" in said and "pushed run" not in said


def test_a_secret_too_short_to_tell_from_words_is_masked_only_where_it_is_the_value():
    """A passthrough value of '8' is masked as the variable's value, not in every word that reads 8."""
    spec = DeploymentSpec(model_path="m", nodes=1, gpus_per_node=8, passthrough_env=("SHORT",))
    text = build_plan(spec, environ={"SHORT": "8"}).render()
    assert "export SHORT='***'" in text and "--tp-size 8" in text
