"""Secrets masked by name and by value without rewriting what is not secret: names matched by parts,
inherited variables masked like passed ones, a value masked only where it stands whole (never inside
a path or a number), YAML copies still YAML, and every URL shown without its credentials (the
Pushgateway's too, malformed or with a `?token=`). Every value here is synthetic."""
from __future__ import annotations

import logging
import sys

import pytest
import yaml

import prom_servers
import synthetic_run
from harness.cli import main
from harness.metrics.push import push_run
from harness.node.process import ServerProcess
from harness.progress import Progress
from harness.run_dir import write_manifest
from harness.run_secrets import run_secrets
from harness.scenario import parse_scenario, scenario_to_yaml
from harness.sglang.plan import DeploymentSpec, build_plan

OPENAI_KEY = "synthetic-openai-key-1111"
PASSPHRASE = "synthetic-passphrase-2222"
INHERITED = "synthetic-inherited-token-3333"
QUERY_TOKEN = "synthetic-query-token-4444"
URL_PASSWORD = "synthetic-url-password-5555"
FLAG = "synthetic-flag-secret-6666"


def _scenario_text(engine_lines: str = "", model_path: str = "/data/hf/models/m") -> str:
    return (f"name: s\ncluster: {{nodes: 1, gpus_per_node: 1}}\nengine:\n  kind: sglang\n"
            f"  model_path: {model_path}\n{engine_lines}model: {{name: m}}\nworkload: {{output_len: 64}}\n")


def _served(tmp_path, script: str, env: dict[str, str], secrets=None) -> tuple[str, str]:
    """A real server process that prints and exits: (its log as written, its log tail)."""
    log = tmp_path / "server.log"
    server = ServerProcess([sys.executable, "-c", script], env, str(log), secrets=secrets)
    server.start()
    server.proc.wait(timeout=30)
    server.stop()
    return log.read_text(), server.log_tail()


def test_secret_names_are_matched_by_parts_in_the_plan_and_its_manifest_entry():
    spec = DeploymentSpec(model_path="m", nodes=1, gpus_per_node=1,
                          env={"OPENAI_APIKEY": OPENAI_KEY, "MY_PASSPHRASE": PASSPHRASE, "NUM_KEYS": "16"})
    plan = build_plan(spec, environ={})
    shown = plan.render() + yaml.safe_dump(plan.to_manifest())
    assert OPENAI_KEY not in shown and PASSPHRASE not in shown
    assert "export OPENAI_APIKEY='***'" in shown and "export MY_PASSPHRASE='***'" in shown
    assert "export NUM_KEYS=16" in shown  # a plural counts things


def test_names_that_only_mention_a_token_are_not_masked():
    """TOKEN in the middle of a flag's name (a path, a threshold) is no secret; the whole-word rule hid them."""
    flags = ("--speculative-token-map", "/data/maps/draft-map.pt", "--tbo-token-distribution-threshold", "0.48",
             "--bucket-time-to-first-token", "0.1")
    spec = DeploymentSpec(model_path="m", nodes=1, gpus_per_node=1, extra_args=flags,
                          env={"SSH_AUTH_SOCK": "/tmp/agent.sock", "MAX_TOKENS": "4096"})
    text = build_plan(spec, environ={}).render()
    assert "--speculative-token-map /data/maps/draft-map.pt" in text
    assert "--tbo-token-distribution-threshold 0.48" in text and "--bucket-time-to-first-token 0.1" in text
    assert "export SSH_AUTH_SOCK=/tmp/agent.sock" in text and "export MAX_TOKENS=4096" in text


def test_engine_env_secret_names_are_masked_in_the_scenario_copies():
    source = _scenario_text(f"  env: {{OPENAI_APIKEY: {OPENAI_KEY}, MY_PASSPHRASE: {PASSPHRASE}}}\n")
    scenario = parse_scenario(source, "s.yaml")
    copy = scenario_to_yaml(scenario, run_secrets(scenario, environ={}))
    assert OPENAI_KEY not in copy and PASSPHRASE not in copy
    assert yaml.safe_load(copy)["engine"]["env"] == {"OPENAI_APIKEY": "***", "MY_PASSPHRASE": "***"}


def test_a_pd_roles_secret_variable_and_flag_are_masked_in_the_scenario_copy():
    """Values too short to look for anywhere (`k9`) are masked by their place, at any depth."""
    role = "    prefill: {env: {OPENAI_APIKEY: short}, extra_args: [--api-key, k9, --mem-fraction-static, '0.8']}\n"
    source = _scenario_text(f"  disaggregation:\n{role}").replace("nodes: 1,", "nodes: 2,")  # a node per role
    scenario = parse_scenario(source, "s.yaml")
    prefill = yaml.safe_load(scenario_to_yaml(scenario, run_secrets(scenario, {})))["engine"]["disaggregation"]["prefill"]
    assert prefill["env"] == {"OPENAI_APIKEY": "***"}
    assert prefill["extra_args"] == ["--api-key", "***", "--mem-fraction-static", "0.8"]


def test_a_variable_the_server_inherits_is_masked_in_its_log(tmp_path, monkeypatch):
    """Set on the node, not in passthrough_env: the server still sees it, and prints it."""
    monkeypatch.setenv("DEPLOY_TOKEN", INHERITED)
    log, tail = _served(tmp_path, "import os; print('using', os.environ['DEPLOY_TOKEN'], flush=True)", env={})
    assert INHERITED not in log + tail
    assert "using ***" in log


def test_a_variable_the_driver_inherits_is_masked_in_the_manifest_and_on_the_console(tmp_path, capsys):
    scenario = parse_scenario(_scenario_text(), "s.yaml")
    secrets = run_secrets(scenario, environ={"DEPLOY_TOKEN": INHERITED, "HOME": "/home/synthetic"})
    write_manifest(tmp_path, {"error": {"message": f"node 0 refused token {INHERITED}"}, "home": "/home/synthetic"},
                   secrets.data)
    manifest = (tmp_path / "manifest.json").read_text()
    progress = Progress()
    progress.hide(secrets.text)
    progress.note(f"server said: bad token {INHERITED}")
    console = capsys.readouterr().err
    assert INHERITED not in manifest + console
    assert "refused token ***" in manifest and "bad token ***" in console and "/home/synthetic" in manifest


@pytest.mark.parametrize("url", [f"http://pusher:{URL_PASSWORD}@gateway.example:notaport/",
                                 f"pusher:{URL_PASSWORD}@gateway.example:notaport"])
def test_a_malformed_pushgateway_url_is_refused_without_its_password(url, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["metrics", "no-run-needed", "--pushgateway", url])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "not a URL" in err
    assert URL_PASSWORD not in err and "***@gateway.example:notaport" in err


def test_a_token_in_the_pushgateway_query_is_neither_printed_nor_stored(tmp_path, caplog):
    run_dir = synthetic_run.build(tmp_path)
    gateway = f"http://127.0.0.1:{prom_servers.free_port()}/?token={QUERY_TOKEN}"  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="harness.metrics.push"):
        result = push_run(run_dir, gateway, deadline_s=2.0)
    assert result is not None and not result.ok
    said = result.url + result.message + caplog.text  # what run.py prints and stores in the manifest
    assert QUERY_TOKEN not in said and "token=***" in result.url
    scenario = parse_scenario(_scenario_text(), "s.yaml")
    assert QUERY_TOKEN not in run_secrets(scenario, {}, gateway).text(f"the gateway answered for {QUERY_TOKEN}")


def test_url_query_tokens_are_masked_in_the_plan_and_by_validate(tmp_path, capsys):
    spec = DeploymentSpec(model_path="m", nodes=1, gpus_per_node=1,
                          env={"MIRROR": f"https://mirror.example/models?token={QUERY_TOKEN}&rev=main"})
    text = build_plan(spec, environ={}).render()
    assert QUERY_TOKEN not in text and "https://mirror.example/models?token=***&rev=main" in text
    path = tmp_path / "s.yaml"
    path.write_text(_scenario_text(model_path=f"https://hub.example/m?access_token={QUERY_TOKEN}"))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert QUERY_TOKEN not in out and "https://hub.example/m?access_token=***" in out


def test_a_passed_through_path_is_not_masked_inside_other_paths():
    """HF_HOME is passed through (so masked as a value), but /data/hf/models/m is not HF_HOME."""
    spec = DeploymentSpec(model_path="/data/hf/models/m", nodes=1, gpus_per_node=1, passthrough_env=("HF_HOME",))
    plan = build_plan(spec, environ={"HF_HOME": "/data/hf"})
    text = plan.render() + yaml.safe_dump(plan.to_manifest())
    assert "--model-path /data/hf/models/m" in text and "export HF_HOME='***'" in text
    scenario = parse_scenario(_scenario_text("  passthrough_env: [HF_HOME]\n"), "s.yaml")
    copy = yaml.safe_load(scenario_to_yaml(scenario, run_secrets(scenario, {"HF_HOME": "/data/hf"})))
    assert copy["engine"]["model_path"] == "/data/hf/models/m"


def test_a_secret_equal_to_the_port_masks_the_secret_not_the_port():
    spec = DeploymentSpec(model_path="m", nodes=1, gpus_per_node=1, port=30000, env={"SERVER_TOKEN": "30000"})
    text = build_plan(spec, environ={}).render()
    assert "--port 30000" in text and "export SERVER_TOKEN='***'" in text


def test_a_server_log_masks_a_secret_where_it_stands_not_inside_paths_or_numbers(tmp_path):
    """The plan's secrets: a passed-through HF_HOME, a token equal to the port, a short --api-key."""
    spec = DeploymentSpec(model_path="m", nodes=1, gpus_per_node=1, port=30000, passthrough_env=("HF_HOME",),
                          env={"SERVER_TOKEN": "30000"}, extra_args=("--api-key", "k9"))
    launch = build_plan(spec, environ={"HF_HOME": "/data/hf"}).nodes[0]
    script = ("print('port 30000 of 130000, SERVER_TOKEN=30000, HF_HOME=/data/hf, reading /data/hf/models/m,', "
              "'server_args=ServerArgs(api_key=\\'k9\\', admin_api_key=None)', flush=True)")
    log, _ = _served(tmp_path, script, dict(launch.env), launch.secrets)
    assert "port 30000 of 130000" in log and "reading /data/hf/models/m" in log
    assert "SERVER_TOKEN=***, HF_HOME=***," in log and "api_key='***', admin_api_key=None" in log


def test_the_scenario_source_copy_stays_yaml_and_keeps_what_is_not_secret():
    """harness/run.py writes scenario.source.yaml with Secrets.yaml; a `***` left plain is a YAML alias."""
    source = ("# synthetic scenario; the flag's value is " + FLAG + "\n"
              + _scenario_text(f"  passthrough_env: [HF_HOME]\n  port: 30000\n"
                               f"  env: {{OPENAI_APIKEY: short, SERVER_TOKEN: '30000'}}\n"
                               f"  extra_args: [--api-key, {FLAG}, --served-model-name, m]\n"))
    scenario = parse_scenario(source, "s.yaml")
    secrets = run_secrets(scenario, environ={"HF_HOME": "/data/hf"})
    copy = secrets.yaml(source)
    loaded = yaml.safe_load(copy)
    assert FLAG not in copy and "short" not in copy
    assert loaded["engine"]["extra_args"] == ["--api-key", "***", "--served-model-name", "m"]
    assert loaded["engine"]["env"] == {"OPENAI_APIKEY": "***", "SERVER_TOKEN": "***"}
    assert loaded["engine"]["model_path"] == "/data/hf/models/m" and loaded["engine"]["port"] == 30000
    assert copy.startswith("# synthetic scenario; the flag's value is ***\n")
