"""harness/run.py's SGLang path end to end on a real 2-node Ray cluster (two raylets, GPUs declared),
the real per-node actors starting the fake SGLang server in place of sglang.launch_server."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import psutil
import pytest
import yaml

from analysis.pipeline import AnalysisOptions, analyze

from analysis.tables.kernel_table import read_kernel_rows
from analysis.tables.d4 import render_markdown
from harness.run import run
from harness.scenario import parse_scenario
from harness.scenario_sol import sol_settings_for
from conftest import real_trace
from tests.ports import free_port_run
from tests.ray_cluster import two_node_cluster
from tests.run_dir_reanalysis import assert_analyze_reproduces
from prom_fixture import prom_stack  # noqa: F401  (session fixture: a real Pushgateway)

REPO = Path(__file__).resolve().parent.parent
FAKE = str(REPO / "tests" / "fake_sglang" / "server.py")
SCENARIO = REPO / "tests" / "scenarios" / "sglang_fake_2node.yaml"
SECRET = "hf_TEST_secret_value_123"
pytestmark = pytest.mark.timeout(180)


def _fake_servers() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if FAKE in (p.info["cmdline"] or [])]


def _scenario(tmp_path: Path, profile_timeout_s: float | None = None, ready_timeout_s: float | None = None,
              gpu_type: str | None = None, engine: dict | None = None, profile: dict | None = None,
              cluster: dict | None = None, analysis: dict | None = None, **engine_env: str):
    """The test scenario with a free port (and fault-injection variables), written where run() reads it."""
    data = yaml.safe_load(SCENARIO.read_text())
    data["engine"]["port"] = free_port_run(8)  # node r serves on port + r
    data["engine"]["dist_init_port"] = free_port_run(1)  # node 0 meets the others there: never a fixed port
    data["engine"].update(engine or {})
    data["profile"].update(profile or {})
    data["cluster"].update(cluster or {})
    data["analysis"].update(analysis or {})
    if gpu_type is not None:
        data["cluster"]["gpu_type"] = gpu_type
    if profile_timeout_s is not None:
        data["profile"]["timeout_s"] = profile_timeout_s
    if ready_timeout_s is not None:
        data["engine"]["ready_timeout_s"] = ready_timeout_s
    data["engine"]["env"].update(engine_env)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return parse_scenario(path.read_text(), str(path)), path


@pytest.fixture(scope="module")
def cluster(sglang_sources):
    with two_node_cluster(gpus_per_node=2) as c:
        yield c


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", SECRET)  # passed through to every server, masked everywhere it is written
    monkeypatch.setenv("MOE_HARNESS_NODE_DIR", str(tmp_path / "nodes"))


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _no_secret_in(run_dir: Path) -> None:
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaked, f"secret written unmasked to {leaked}"


def test_two_node_run_launches_loads_profiles_every_rank_and_writes_d4(cluster, env, tmp_path, capsys):
    scenario, path = _scenario(tmp_path, gpu_type="H800")  # with the default model deepseek-v3: SOL columns
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    # one server per node, placed on distinct Ray nodes, each with its own --node-rank
    assert len({n["ray_node_id"] for n in manifest["nodes"]}) == 2
    argvs = [n["argv"] for n in manifest["plan"]["nodes"]]
    assert [a[a.index("--node-rank") + 1] for a in argvs] == ["0", "1"]
    # spelled for the default release (0.5.23), which each node's own parser accepted before the start
    assert manifest["sglang_version"] == manifest["plan"]["sglang_version"] == "0.5.23"
    assert "--attn-dp-size" in argvs[0] and "--enable-dp-attention" not in argvs[0]
    assert {r: (c["sglang_version"], c["problems"]) for r, c in manifest["node_check"].items()} == \
        {"0": ("0.5.23", []), "1": ("0.5.23", [])}
    for rank in (0, 1):
        log = (run_dir / "logs" / f"sglang-node{rank}.log").read_text()
        assert log.count(f"fake sglang 0.5.23: node {rank}/2 tp=4 pp=1 dp=4 ep=4") == 1
    assert manifest["plan"]["nodes"][0]["env"]["HF_TOKEN"] == "***"
    # load records: every request completed with every token (MTP chunks carry 3 tokens each)
    records = [json.loads(line) for line in (run_dir / "load" / "requests.jsonl").read_text().splitlines()]
    assert len(records) >= 8 and all(r["ok"] and r["output_tokens"] == 120 for r in records)
    # the accept length of the profiled window (3 tokens per verify step), not the server's cumulative one
    summary = json.loads((run_dir / "load" / "summary.json").read_text())
    assert summary["completed"] == len(records) and summary["accept_length"] == pytest.approx(3.0, abs=0.2)
    assert manifest["profile"]["profiler"] == "v2" and manifest["profile"]["stop_profile"] is None
    # every rank's DECODE trace, named as SGLang names them, copied back through Ray
    names = sorted(p.name for p in (run_dir / "traces").iterdir())
    assert all(n.startswith(f"{run_dir.name}-") for n in names)  # the prefix sent with /start_profile
    assert [n[len(run_dir.name) + 1:].split("-", 1)[1] for n in names] == [
        f"TP-{r}-DP-{r}-EP-{r}-DECODE.trace.json.gz" for r in range(4)]
    assert not list((tmp_path / "nodes").rglob("*.trace.json.gz")), "node-local traces left behind"
    # the D4 table from the nodes' own analyses equals analysing the kept traces in one place
    d4 = (run_dir / "analysis" / "d4.md").read_text()
    assert "| moe | sum |" in d4 and "ranks 4 (mean)" in d4
    # SOL settings read off the scenario: dp attention 4 -> tp 1, dp 4, ep 4; batch 8 / 4; 3 draft tokens - 1
    sol, why = sol_settings_for(scenario)
    assert why == "" and (sol.hardware, sol.deployment.dp, sol.deployment.batch_per_rank) == ("h800", 4, 2)
    assert "SOL us" in d4 and "deepseek-v3 on h800" in d4
    # the profiled steps against the load: the window's start recorded on the load's clock, before the
    # last token of the load and after the first
    start_s, end_s = manifest["profile"]["window_load_s"]
    assert min(r["start_s"] for r in records) < start_s < end_s
    assert "opened at" in d4 and "recorded by the run" in d4 and "| profiled vs load | profiler overhead |" in d4
    checks = (run_dir / "analysis" / "checks.csv").read_text()
    assert "profiler_overhead" in checks and "no load records given" not in checks
    # 0.5.23 was asked for detailed annotations: every step label says its batch's KV lengths and pass
    steps = list(csv.DictReader(open(run_dir / "analysis" / "steps.csv", newline="")))
    verify = [s for s in steps if s["stage"] == "target_verify"]
    assert verify and all(int(s["kv_tokens"]) >= int(s["batch_size"]) * scenario.workload.input_len for s in verify)
    for rank in {s["rank"] for s in verify}:  # the passes in order (the fake repeats the last on extra template steps)
        ids = [int(s["forward_id"]) for s in verify if s["rank"] == rank]
        assert ids == sorted(ids) and len(set(ids)) >= scenario.profile.num_steps
    assert "the profiled steps' own shape (SGLang's detailed annotations" in d4
    assert "the SOL columns use them in place of the given batch and KV length" in d4
    direct = analyze(sorted(str(p) for p in (run_dir / "traces").iterdir()),
                     options=AnalysisOptions(run=run_dir.name, accept_length=manifest["accept_length"], jobs=1, sol=sol,
                                             load_records=str(run_dir / "load" / "requests.jsonl"),
                                             window_start_s=start_s))
    assert render_markdown([direct.d4]) == d4
    kernels = read_kernel_rows(run_dir / "analysis" / "kernels_long.parquet")
    assert {row.rank for row in kernels} == {f"TP{r}-DP{r}-EP{r}" for r in range(4)}
    _no_secret_in(run_dir)
    assert not _fake_servers(), "a server outlived the run"
    # the run directory analysed again (SOL, MTP accept length, two nodes' ranks) gives the run's files and table
    assert_analyze_reproduces(run_dir, tmp_path / "again", capsys)


def test_secrets_are_masked_by_value_in_every_file_and_on_the_console(cluster, env, tmp_path, monkeypatch, prom_stack,
                                                                     capsys):
    """A passthrough variable with a plain name, an --api-key in extra_args and a Pushgateway password:
    each reached its server or gateway and none is in any file the run wrote or on its console (the
    plain name and the flag used to be in plan.sh, the manifest and scenario.yaml, the password in
    the manifest and on the console)."""
    from harness.run import MetricsOptions

    plain, flag, password = "plain-passthrough-value-4711", "sk-flag-secret-0815", "pw-in-pushgateway-url-77"
    monkeypatch.setenv("MODEL_ACCESS", plain)
    scenario, path = _scenario(tmp_path, engine={"passthrough_env": ["HF_TOKEN", "MODEL_ACCESS"],
                                                 "extra_args": ["--api-key", flag]})
    host = prom_stack["pushgateway"].split("://", 1)[1]
    status, run_dir = run(scenario, path, tmp_path / "runs",
                          metrics=MetricsOptions(pushgateway=f"http://pusher:{password}@{host}"))
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    assert manifest["metrics"]["pushed"] and manifest["plan"]["nodes"][0]["env"]["MODEL_ACCESS"] == "***"
    console = capsys.readouterr()
    for secret in (SECRET, plain, flag, password):
        leaked = [p for p in run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
        assert not leaked, f"{secret} written unmasked to {leaked}"
        assert secret not in console.out + console.err, secret


@pytest.mark.parametrize("fail,node,phase,message", [
    ("exit_at_start", "1", "start SGLang on 2 node(s)",
     r"node 1: (SGLang )?server exited with status 3(.|\n)*fake startup failure"),
    ("hang_ready", "0", "start SGLang on 2 node(s)", r"node 0: server not ready after 4 s"),
    ("die_mid_load:3", "0", "load to a running batch of 8",
     r"node 0: SGLang server exited with status 4(.|\n)*scheduler died"),
    ("no_profile_file", "1", "profile 3 decode steps on every rank",
     r"node 1: no trace \(decode stage\) for rank\(s\) TP-2-DP-2-EP-2, TP-3-DP-3-EP-3"),
])
def test_a_failing_node_ends_the_run_with_its_message_and_keeps_earlier_files(cluster, env, tmp_path, fail, node,
                                                                               phase, message):
    import re

    scenario, path = _scenario(tmp_path, profile_timeout_s=5, ready_timeout_s=4, FAKE_SGLANG_FAIL=fail,
                               FAKE_SGLANG_FAIL_NODE=node)
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"], manifest["error"]["phase"]) == (1, "failed", phase)
    assert re.search(message, manifest["error"]["message"]), manifest["error"]["message"]
    assert (run_dir / "plan.sh").exists() and (run_dir / "scenario.yaml").exists()
    assert f"node {node}/2" in (run_dir / "logs" / f"sglang-node{node}.log").read_text()
    if fail.startswith("die_mid_load"):  # the requests answered before the death are kept
        records = [json.loads(line) for line in (run_dir / "load" / "requests.jsonl").read_text().splitlines()]
        assert any(not r["ok"] for r in records)
    if fail == "no_profile_file":
        records = [json.loads(line) for line in (run_dir / "load" / "requests.jsonl").read_text().splitlines()]
        assert records and all(r["ok"] for r in records)  # the load ran before the profile failed
        kept = list((tmp_path / "nodes").rglob("*TP-0-DP-0-EP-0-DECODE.trace.json.gz"))
        assert len(kept) == 1 and manifest["node_dir"] in str(kept[0])  # node 0's trace is kept where it was
        assert "analysis" not in {p.name for p in run_dir.iterdir()}
    files = {f["path"] for f in manifest["files"]}
    assert "scenario.yaml" in files and f"logs/sglang-node{node}.log" in files
    _no_secret_in(run_dir)
    assert not _fake_servers(), "a server outlived the failed run"


def test_node_actor_analyses_its_ranks_and_names_itself_when_it_cannot(cluster, tmp_path):
    import gzip
    import shutil

    import ray

    from harness.sglang.server_actor import DeploymentError, SGLangNodeActor

    good = tmp_path / "p-1.5-TP-2-DECODE.trace.json.gz"
    shutil.copyfile(REPO / "tests" / "data" / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-deepgemm-moe-TP-0-DECODE.trace.json.gz", good)
    bad = tmp_path / "p-1.5-TP-3-DECODE.trace.json.gz"
    bad.write_bytes(gzip.compress(b"{not json"))
    actor = SGLangNodeActor.remote(1)
    try:
        options = {"run": "r", "signature": "generic", "model": None, "rank_policy": "mean", "jobs": 1}
        part = ray.get(actor.analyze_traces.remote([str(good)], options), timeout=60)
        assert {r.rank for r in part["kernel_rows"]} == {"TP2"} and part["step_rows"] and not part["problems"]
        with pytest.raises(DeploymentError, match=r"node 1: analysis of 1 trace\(s\) failed: no rank could be analysed"):
            ray.get(actor.analyze_traces.remote([str(bad)], options), timeout=60)
    finally:
        ray.kill(actor)


def test_a_planted_unknown_flag_is_refused_on_each_node_before_any_server_starts(cluster, env, tmp_path):
    scenario, path = _scenario(tmp_path, engine={"extra_args": ["--enable-dp-attn"]})
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"], manifest["error"]["phase"]) == (1, "failed", "start SGLang on 2 node(s)")
    message = manifest["error"]["message"]
    assert message.startswith("SGLang refuses the planned command; no server was started:")
    for node in (0, 1):
        assert (f"node {node}: --enable-dp-attn (from engine.extra_args): unknown: SGLang 0.5.23 says: "
                "not a flag of this SGLang") in message
    assert not (run_dir / "logs").exists() and not _fake_servers()  # no server ever started
    assert (run_dir / "plan.sh").exists()


def test_an_older_release_is_planned_in_its_own_spelling_and_runs(cluster, env, tmp_path):
    scenario, path = _scenario(tmp_path, FAKE_SGLANG_VERSION="0.5.17", engine={"cuda_graph_max_bs": 8})
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True, sglang_version="0.5.17")
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    argv = " ".join(manifest["plan"]["nodes"][0]["argv"])
    assert "--dp-size 4 --enable-dp-attention" in argv and "--cuda-graph-max-bs-decode 8" in argv
    assert manifest["node_check"]["0"] == {"sglang_version": "0.5.17", "problems": []}


# The fake's pass for runs whose every profiled step must run the whole batch: the harness opens its window
# while the batch's shortest request has the window's tokens and two passes more to come (5 passes here),
# and its reaction from that check to the profile's start took more than 0.2 s on this 2-core machine while
# other jobs ran (_run_prefill_heavy). At the scenario's 10 ms passes a full CI run beside a process spinning
# on the other core saw every profiled step at half the batch (bs=1 of 2: status "off"); alone, beside the
# same process, three runs passed.
WHOLE_BATCH_STEP_MS = "60"


def _step_labels(trace: Path) -> set[str]:
    import gzip
    data = json.loads(gzip.decompress(trace.read_bytes()))
    return {e["name"] for e in data["traceEvents"] if str(e.get("name", "")).startswith("step[")}


@pytest.mark.parametrize("release,spelling,verify,detailed", [
    ("0.5.17", "--dp-size 4 --enable-dp-attention", "TARGET_VERIFY", False),
    ("0.5.23", "--attn-dp-size 4", "VERIFY", True),
])
def test_each_dialect_is_detected_planned_for_and_its_profiled_batch_checked(cluster, env, tmp_path, release,
                                                                            spelling, verify, detailed):
    """No --sglang-version: the nodes say which release they have; the plan is spelled for it, and every
    profiled step's bs (the fake labels each step with its DP group's running requests) is the
    scenario's batch per scheduler: 8 requests over 4 DP groups."""
    scenario, path = _scenario(tmp_path, FAKE_SGLANG_VERSION=release, FAKE_SGLANG_STEP_MS=WHOLE_BATCH_STEP_MS)
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    assert manifest["profile"]["whole_batch_outlasts_window"] is True and manifest["profile"]["running_at_start"] == 8
    assert (manifest["sglang_version"], manifest["sglang_version_from"]) == (release, "installed on the nodes")
    assert spelling in " ".join(manifest["plan"]["nodes"][0]["argv"]) and f"SGLang {release} plan" in \
        (run_dir / "plan.sh").read_text()
    labels = set().union(*(_step_labels(p) for p in (run_dir / "traces").iterdir()))
    if detailed:  # asked for detailed annotations: the batch's aggregates and the pass after bs=N
        assert labels and all(re.fullmatch(rf"step\[{verify} bs=2 g_sq=6 g_sqsq=18 g_sqsk=\d+ g_sk=\d+ forward_id=\d+\]",
                                           label) for label in labels), labels
    else:
        assert labels == {f"step[{verify} bs=2]"}, labels
    batch = manifest["profiled_batch"]
    assert (batch["status"], batch["expected_per_scheduler"], batch["off_steps"]) == ("ok", [2, 2], [])
    assert batch["checked_steps"] >= 4 * 3  # every rank's profiled verify steps
    assert f"Profiled batch: all {batch['checked_steps']} decode/verify steps ran at the scenario's 2 requests " \
           "per scheduler" in (run_dir / "table.md").read_text()


def test_a_release_newer_than_the_table_on_the_nodes_runs_with_a_warning(cluster, env, tmp_path):
    """Nodes with 9.9.9 (its flags lent by 0.5.23's wheel: PyPI has no 9.9.9): planned as 0.5.23, said so."""
    scenario, path = _scenario(tmp_path, FAKE_SGLANG_VERSION="9.9.9", FAKE_SGLANG_FLAGS_FROM="0.5.23",
                               FAKE_SGLANG_STEP_MS=WHOLE_BATCH_STEP_MS)
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    assert (manifest["sglang_version"], manifest["sglang_assumed_as"]) == ("9.9.9", "0.5.23")
    assert manifest["node_check"]["0"] == {"sglang_version": "9.9.9", "problems": []}
    assert (run_dir / "plan.sh").read_text().startswith("# SGLang 9.9.9 plan")
    assert manifest["profiled_batch"]["status"] == "ok"


def test_a_ramp_up_step_in_the_window_is_named_under_the_table_and_in_problems(cluster, env, tmp_path, capsys):
    scenario, path = _scenario(tmp_path, FAKE_SGLANG_FAIL="ramp_up")  # the first profiled step at half the batch
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")  # reported, not fatal
    batch = manifest["profiled_batch"]
    assert batch["status"] == "off" and {(s["rank"], s["step"], s["bs"]) for s in batch["off_steps"]} == \
        {(f"TP{r}-DP{r}-EP{r}", 1, 1) for r in range(4)}  # step 0 is the draft pass before the first verify
    table = (run_dir / "table.md").read_text()
    assert "Profiled batch: 4 of" in table and "TP0-DP0-EP0 step 1 bs=1" in table
    problems = (run_dir / "analysis" / "problems.csv").read_text()
    assert "profiled batch: step 1 (target_verify): bs=1, the scenario's batch per scheduler is 2: a ramp-up step" in problems
    assert_analyze_reproduces(run_dir, tmp_path / "again", capsys)  # the profiled-batch problems too


def test_a_given_release_other_than_the_installed_one_is_refused_before_any_server_starts(cluster, env, tmp_path):
    scenario, path = _scenario(tmp_path, FAKE_SGLANG_VERSION="0.5.20")
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True, sglang_version="0.5.22")
    manifest = _manifest(run_dir)
    assert (status, manifest["error"]["phase"]) == (1, "start SGLang on 2 node(s)")
    assert manifest["sglang_version_from"] == "--sglang-version"
    for node in (0, 1):
        assert (f"node {node}: SGLang 0.5.20 is installed, the plan is spelled for 0.5.22: run with --sglang-version "
                "0.5.20, or without it") in manifest["error"]["message"]
    assert not (run_dir / "logs").exists() and not _fake_servers()


def test_nodes_with_a_release_older_than_the_range_are_refused_before_any_server_starts(cluster, env, tmp_path):
    scenario, path = _scenario(tmp_path, FAKE_SGLANG_VERSION="0.5.13")  # the release before 0.5.13.post1
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["error"]["phase"]) == (1, "start SGLang on 2 node(s)")
    assert "SGLang 0.5.13 is not supported; supported: every release from 0.5.13.post1" in manifest["error"]["message"]
    assert manifest["error"]["message"].endswith("no server was started")
    assert not (run_dir / "logs").exists() and not _fake_servers()


def test_installed_release_is_one_release_on_every_node():
    from harness.sglang.node_check import installed_release
    assert installed_release({0: {"sglang_version": "0.5.20"}, 1: {"sglang_version": "0.5.20"}}) == "0.5.20"
    with pytest.raises(ValueError, match="the nodes have different SGLang releases: node 0 0.5.20, node 1 0.5.21"):
        installed_release({0: {"sglang_version": "0.5.20"}, 1: {"sglang_version": "0.5.21"}})
    with pytest.raises(ValueError, match="cannot tell which SGLang the nodes have: node 1: cannot import sglang"):
        installed_release({0: {"sglang_version": "0.5.20"}, 1: {"error": "cannot import sglang: ModuleNotFoundError"}})


def test_classic_profiler_run_gets_decode_traces_and_stops_the_profile(cluster, env, tmp_path):
    scenario, path = _scenario(tmp_path, profile={"sglang_profiler": "v1"})
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    assert "SGLANG_PROFILE_V2" not in manifest["plan"]["nodes"][0]["env"]
    assert manifest["profile"]["profiler"] == "v1" and manifest["profile"]["stop_profile"].startswith("HTTP ")
    names = sorted(p.name for p in (run_dir / "traces").iterdir())
    assert len(names) == 4 and all(n.endswith("-DECODE.trace.json.gz") for n in names)


def test_pipeline_stages_are_profiled_under_their_pp_labels(cluster, env, tmp_path):
    scenario, path = _scenario(tmp_path, engine={"tp": 2, "pp": 2, "dp": 1, "ep": 1, "dp_attention": False,
                                                 "moe_a2a_backend": None, "deepep_mode": None, "speculative": None})
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    labels = sorted(n[len(run_dir.name) + 1:].split("-", 1)[1] for n in (p.name for p in (run_dir / "traces").iterdir()))
    assert labels == sorted(f"TP-{t}-PP-{p}-DECODE.trace.json.gz" for p in (0, 1) for t in (0, 1))
    kernels = read_kernel_rows(run_dir / "analysis" / "kernels_long.parquet")
    assert {row.rank for row in kernels} == {f"TP{t}-PP{p}" for p in (0, 1) for t in (0, 1)}


def test_capture_traces_are_collected_from_every_node(cluster, env, tmp_path, capsys):
    scenario, path = _scenario(tmp_path, profile={"capture_traces": True}, engine={"cuda_graph_bs": [1, 4]})
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    assert manifest["plan"]["nodes"][0]["env"]["SGLANG_GRAPH_BATCH_CAPTURE"] == "1"
    assert "--enable-profile-cuda-graph" in manifest["plan"]["nodes"][1]["argv"]
    assert sorted(manifest["capture_traces"]) == sorted(
        f"capture_traces/node{t // 2}/DecodeCudaGraphRunner_bs_{bs}_rank{t}.json.gz" for t in range(4) for bs in (1, 4))
    assert all((run_dir / p).stat().st_size > 0 for p in manifest["capture_traces"])
    # the fake's default captures are copies of its decode trace: no module ranges, and the run says so
    table = (run_dir / "table.md").read_text()
    assert "Calibration against the capture traces" in table and "node 0 not calibrated" in table
    problems = (run_dir / "analysis" / "problems.csv").read_text()
    assert "no decoder-layer nn.Module ranges in the capture" in problems
    assert [e["node"] for e in manifest["calibration"]] == [0, 1] and all("error" in e for e in manifest["calibration"])
    assert_analyze_reproduces(run_dir, tmp_path / "again", capsys)  # captures from capture_traces/node<N>


def test_capture_traces_recorded_with_stacks_name_the_replays_and_calibrate(cluster, env, tmp_path, capsys):
    """A real pair (SGLang's Qwen3-8B decode on an MI300X and its capture trace) served by the fake:
    each node calibrates the scenario's signature against its captures; that signature disagrees
    (tests/test_calibration.py), so the table is analysed with the structure, and replayed kernels
    are named from the captures."""
    decode = real_trace("amd/sglang_qwen3-8b_mi300x_decode/sglang_Qwen3-8B_decode.json.gz")
    capture = real_trace("amd/sglang_qwen3-8b_mi300x_decode/capture_traces/bs_32_rank0.json.gz")
    scenario, path = _scenario(tmp_path, profile={"capture_traces": True}, engine={"cuda_graph_bs": [32]},
                               analysis={"signature": "sglang-qwen3-dense-mi300"},
                               FAKE_SGLANG_DECODE_TRACE=decode, FAKE_SGLANG_CAPTURE_TRACE=capture)
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    assert [(e["node"], e["chosen"], e["used"]) for e in manifest["calibration"]] == [(0, "generic", "generic"),
                                                                                      (1, "generic", "generic")]
    assert all(e["reason"].startswith("sglang-qwen3-dense-mi300 disagrees") for e in manifest["calibration"])
    steps = list(csv.DictReader((run_dir / "analysis" / "steps.csv").open()))
    assert steps and all(s["note"].startswith("attributed by capture") for s in steps), steps[0]["note"]
    assert json.loads((run_dir / "analysis" / "analysis.json").read_text())["signature"] == "generic"
    report = (run_dir / "analysis" / "calibration.md").read_text()
    assert "## Node 0" in report and "## Node 1" in report and "analysed with **generic**" in report
    table = (run_dir / "table.md").read_text()
    assert "node 0: sglang-qwen3-dense-mi300 disagrees with the calibration" in table
    assert "the table uses generic" in table
    assert_analyze_reproduces(run_dir, tmp_path / "again", capsys)  # calibrated again: calibration.md / .json too


def test_a_run_without_capture_traces_says_it_was_not_calibrated(cluster, env, tmp_path):
    scenario, path = _scenario(tmp_path)
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    assert status == 0
    assert "Not calibrated: profile.capture_traces is off" in (run_dir / "table.md").read_text()
    assert not (run_dir / "analysis" / "calibration.md").exists()


def test_an_error_chunk_fails_the_run_with_the_servers_message(cluster, env, tmp_path):
    import re

    scenario, path = _scenario(tmp_path, FAKE_SGLANG_FAIL="error_chunk:3", FAKE_SGLANG_FAIL_NODE="0")
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["error"]["phase"]) == (1, "load to a running batch of 8")
    assert re.search(r"request \d+ failed: server error in the stream after 1 token\(s\): The request was aborted: "
                     r"KV cache pool is full \(fault injected\)", manifest["error"]["message"]), manifest["error"]
    records = [json.loads(line) for line in (run_dir / "load" / "requests.jsonl").read_text().splitlines()]
    assert any("KV cache pool is full" in (r["error"] or "") for r in records)


def _run_prefill_heavy(tmp_path: Path, profiler: str, **engine_env: str):
    """One GPU, chunked prefill of 8-token prompts at 1 token per batch, 12-token outputs: prefill
    batches outnumber decode ones. A pass takes 60 ms (the fake's default is 20): the 11 decode passes
    of a batch admitted whole must outlast the harness's reaction from its last first token to the
    profile's start, which took more than 0.2 s on this 2-core machine while other jobs ran (the test
    failed there 1 time in 4 at 20 ms; a real decode batch runs hundreds of tokens). Returns run()'s
    (status, run directory)."""
    engine_env.setdefault("FAKE_SGLANG_STEP_MS", "60")
    _, path = _scenario(tmp_path, FAKE_SGLANG_PREFILL_CHUNK="1", profile={"sglang_profiler": profiler},
                        cluster={"nodes": 1, "gpus_per_node": 1},
                        engine={"tp": 1, "dp": 1, "ep": 1, "dp_attention": False, "moe_a2a_backend": None,
                                "deepep_mode": None, "speculative": None}, **engine_env)
    data = yaml.safe_load(path.read_text())
    data["workload"]["output_len"] = 12
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return run(parse_scenario(path.read_text(), str(path)), path, tmp_path / "runs", quiet=True)


@pytest.mark.parametrize("profiler", ["v2", "v1"])
def test_a_prefill_heavy_load_still_gives_the_decode_trace(cluster, env, tmp_path, profiler):
    """Chunked prefill of 8-token prompts at 1 token per batch, 12-token outputs: prefill batches outnumber
    decode ones. Started mid-decode under that load, SGLang's classic by-stage profiler restarts its capture
    at the next prefill and writes it as -EXTEND, never -DECODE (what the harness did before: no trace,
    run failed). The decode-only window gets the DECODE trace with either profiler."""
    status, run_dir = _run_prefill_heavy(tmp_path, profiler)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    names = [p.name for p in (run_dir / "traces").iterdir()]
    assert len(names) == 1 and names[0].endswith("-TP-0-DECODE.trace.json.gz")
    assert not list((tmp_path / "nodes").rglob("*EXTEND*")), "a prefill was captured"


def test_when_ages_never_line_up_the_batch_is_admitted_again_whole(cluster, env, tmp_path, monkeypatch):
    """A prefill-heavy load on a 0.5.23 server whose classic profiler waits for a decode batch of 8
    (SGLANG_PROFILE_BY_STAGE_DECODE_MIN_BS): when the moment of 8 requests with the window's tokens still
    to come does not come (here the wait for it is cut to nothing, as a slow machine did), settling for one
    young request left a batch that shrank below 8 and no capture ever started. The window lets the batch
    finish and admits it whole again instead, and the profiled steps run all 8 requests."""
    from harness.sglang import profile as sglang_profile

    monkeypatch.setattr(sglang_profile, "AGES_LINE_UP_WAIT_S", 0.0)
    status, run_dir = _run_prefill_heavy(tmp_path, "v1", FAKE_SGLANG_VERSION="0.5.23")
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    assert manifest["profile"]["whole_batch_outlasts_window"] is True and manifest["profile"]["running_at_start"] == 8


def test_a_server_without_tokenizer_gets_token_id_requests(cluster, env, tmp_path):
    """A model directory with no tokenizer files is served with --skip-tokenizer-init (as the real
    GPU run does): SGLang then refuses text prompts, so the load must send input_ids."""
    scenario, path = _scenario(tmp_path, profile_timeout_s=120, engine={"extra_args": ["--skip-tokenizer-init"]})
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    summary = json.loads((run_dir / "load" / "summary.json").read_text())
    assert summary["failed"] == 0 and summary["completed"] > 0


def test_expert_load_on_a_release_whose_recorder_breaks_on_a_fused_shared_expert(cluster, env, tmp_path, capsys):
    """SGLang before 0.5.21 counts a fused shared expert's top-k id past the recorder's counter and the
    server dies at its first forward (seen on an H100 with 0.5.17, the fake does the same): the plan
    turns the fusion off there, and says so in the table."""
    scenario, path = _scenario(tmp_path, FAKE_SGLANG_VERSION="0.5.17", profile={"expert_load": True})
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    node = manifest["plan"]["nodes"][0]
    assert "--disable-shared-experts-fusion" in node["argv"]
    assert node["flag_keys"]["--disable-shared-experts-fusion"] == "profile.expert_load"
    assert (run_dir / manifest["expert_load"]["file"]).is_file()
    assert "shared experts not fused" in (run_dir / "table.md").read_text()
    assert_analyze_reproduces(run_dir, tmp_path / "again", capsys)  # the fusion note from the recorded plan


def test_expert_load_is_recorded_over_the_profiled_window_and_shown_per_moe_layer(cluster, env, tmp_path, capsys):
    scenario, path = _scenario(tmp_path, profile={"expert_load": True})
    status, run_dir = run(scenario, path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    argv = manifest["plan"]["nodes"][0]["argv"]
    assert argv[argv.index("--expert-distribution-recorder-mode") + 1] == "stat"
    assert argv[argv.index("--expert-distribution-recorder-buffer-size") + 1] == "-1"
    assert "--disable-shared-experts-fusion" not in argv  # 0.5.23's recorder masks a fused shared expert
    # SGLang's own dump (torch.save by rank 0, on node 0) is kept beside the JSON the analysis reads.
    recorded = manifest["expert_load"]
    assert recorded["dump"].startswith("expert_load/expert_distribution_recorder_") and recorded["dump"].endswith(".pt")
    doc = json.loads((run_dir / recorded["file"]).read_text())
    # 4 layers of 256 experts (the fake's model); the dense layer 0 got no token.
    assert [len(layer["tokens_per_expert"]) for layer in doc["layers"]] == [256] * 4
    assert sum(doc["layers"][0]["tokens_per_expert"]) == 0
    passes = doc["forward_passes"]
    assert passes >= 3  # at least the profiled steps; new requests were paused, so decode passes only
    totals = {sum(layer["tokens_per_expert"]) for layer in doc["layers"][1:]}
    # every MoE layer sees the same tokens, each routed to 8 experts; each pass runs at most the 8
    # requests' 3 verify tokens (fewer once requests finish inside the window)
    assert len(totals) == 1 and 0 < min(totals) <= passes * 8 * 3 * 8 and min(totals) % (8 * 3) == 0
    for layer in doc["layers"][1:]:
        per_rank = layer["tokens_per_rank"]
        assert len(per_rank) == 4 and sum(per_rank) == min(totals)  # EP 4, contiguous placement
    d4 = (run_dir / "analysis" / "d4.md").read_text()
    for layer in (1, 2, 3):
        row = next(l for l in d4.splitlines() if l.startswith(f"| expert load | layer {layer} | busiest / mean tokens |"))
        tokens = doc["layers"][layer]["tokens_per_expert"]
        assert f"{max(tokens)} / {sum(tokens) / 256:.1f}" in row
    assert "| 0 | " not in d4.split("Per layer")[-1]  # the dense layer has no expert load line
    assert "busiest expert (tokens)" in d4 and "tokens per rank" in d4
    # compare reads it back from analysis.json
    from analysis.pipeline import load_column
    column = load_column(run_dir / "analysis")
    assert [r.layer for r in column.expert_load.layers] == [1, 2, 3]
    assert "| expert load | layer 2 |" in render_markdown([column, column])
    _no_secret_in(run_dir)
    assert_analyze_reproduces(run_dir, tmp_path / "again", capsys)  # expert load per layer from its file


@pytest.mark.parametrize("when, sig", [("requests.jsonl", "SIGINT"), ("traces", "SIGTERM")])
def test_an_interrupted_sglang_run_stops_every_server_and_leaves_a_true_manifest(cluster, env, tmp_path, when, sig):
    """SIGINT while the load runs (steady state or profile), SIGTERM once traces are being copied back."""
    import os
    import signal
    import threading
    import time

    scenario, path = _scenario(tmp_path)
    runs = tmp_path / "runs"
    sent: list[float] = []

    def signal_when_there() -> None:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            hits = [p for p in runs.glob(f"*/load/{when}") if p.stat().st_size] if when.endswith(".jsonl") \
                else list(runs.glob(f"*/{when}/*.trace.json.gz"))
            if hits:
                sent.append(time.monotonic())
                os.kill(os.getpid(), getattr(signal, sig))  # the main thread gets it, as from a terminal
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=signal_when_there, daemon=True)
    watcher.start()
    status, run_dir = run(scenario, path, runs, quiet=True)
    watcher.join()
    assert sent, "the run ended before the signal could be sent"
    manifest = _manifest(run_dir)
    assert status == 128 + getattr(signal, sig) and manifest["status"] == "interrupted", manifest.get("error")
    assert manifest["error"]["signal"] == sig and manifest["error"]["phase"]
    assert not _fake_servers(), "a server outlived the interrupted run"
    kept = {f["path"] for f in manifest["files"]}
    assert "load/requests.jsonl" in kept and any(k.startswith("logs/sglang-node") for k in kept)
    records = [json.loads(line) for line in (run_dir / "load" / "requests.jsonl").read_text().splitlines()]
    assert records, "the load records collected before the signal are kept"
    assert not (run_dir / ".running").exists()


def test_an_extend_profile_records_a_plain_window_and_tables_its_prefill_steps(cluster, env, tmp_path):
    """profile.stages [EXTEND]: the classic profiler's plain window under the running load (never paused),
    its files without a stage suffix, and the D4 table of their extend steps (the fake writes a real
    prefill window of SGLang 0.5.17, DeepEP normal mode, for a window that held prefill passes)."""
    _, path = _scenario(tmp_path, profile={"stages": ["EXTEND"], "num_steps": 4},
                        cluster={"nodes": 1, "gpus_per_node": 1},
                        engine={"tp": 1, "dp": 1, "ep": 1, "dp_attention": False, "moe_a2a_backend": None,
                                "deepep_mode": None, "speculative": None})
    data = yaml.safe_load(path.read_text())
    data["workload"]["output_len"] = 3  # most passes are prefills
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    status, run_dir = run(parse_scenario(path.read_text(), str(path)), path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    assert manifest["profile"]["profiler"] == "v1" and manifest["profile"]["stage"] == "EXTEND"
    assert "SGLANG_PROFILE_V2" not in manifest["plan"]["nodes"][0]["env"]
    names = sorted(p.name for p in (run_dir / "traces").iterdir())
    assert names and not any(n.endswith(("-DECODE.trace.json.gz", "-EXTEND.trace.json.gz")) for n in names)
    d4 = (run_dir / "analysis" / "d4.md").read_text()
    assert "stage extend" in d4 and "found 4 layers (1 dense + 3 MoE)" in d4, d4[-1500:]
    assert "deep_ep::intranode::dispatch" in d4


PD_SCENARIO = REPO / "tests" / "scenarios" / "sglang_fake_pd.yaml"


def _pd_scenario(tmp_path: Path, **profile) -> Path:
    """The PD test scenario with free ports for both roles, the bootstrap server and the router."""
    data = yaml.safe_load(PD_SCENARIO.read_text())
    base = free_port_run(8)
    pd = data["engine"]["disaggregation"]
    data["engine"]["port"], data["engine"]["dist_init_port"] = base, base + 1
    pd["decode"]["port"], pd["decode"]["dist_init_port"] = base + 2, base + 3
    pd["bootstrap_port"], pd["router"]["port"], pd["router"]["prometheus_port"] = base + 4, base + 5, base + 6
    data["profile"].update(profile)
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_pd_run_starts_both_roles_and_the_router_loads_through_it_and_tables_each_role(cluster, env, tmp_path, capsys):
    """engine.disaggregation: a prefill server and a decode server each on its own Ray node, SGLang's real
    router in front (the fake decode server refuses a request without the router's bootstrap room, and
    serves one only once the prefill side has sent the room's KV), the prefill window under the arriving
    load, the decode window after the pause, each role's folder a run directory with its table, and the TTFT
    split from both servers' per-stage metrics."""
    path = _pd_scenario(tmp_path)
    status, run_dir = run(parse_scenario(path.read_text(), str(path)), path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (0, "ok"), manifest.get("error")
    assert manifest["pd_roles"] == {"prefill": "prefill", "decode": "decode"}
    router_argv = manifest["router"]["argv"]
    assert "--pd-disaggregation" in router_argv and router_argv[router_argv.index("--prefill") + 2] == str(
        yaml.safe_load(path.read_text())["engine"]["disaggregation"]["bootstrap_port"])
    roles = {role: _manifest(run_dir / role) for role in ("prefill", "decode")}
    assert {r: m["status"] for r, m in roles.items()} == {"prefill": "ok", "decode": "ok"}
    # each role on a node of its own, with its disaggregation mode
    assert roles["prefill"]["nodes"][0]["ray_node_id"] != roles["decode"]["nodes"][0]["ray_node_id"]
    for role, m in roles.items():
        argv = m["plan"]["nodes"][0]["argv"]
        assert argv[argv.index("--disaggregation-mode") + 1] == role
    assert roles["prefill"]["profile"]["stage"] == "EXTEND" and roles["decode"]["profile"]["profiler"] == "plain"
    # every request through the router, each with all its tokens (the decode side served them)
    records = [json.loads(line) for line in (run_dir / "load" / "requests.jsonl").read_text().splitlines()]
    assert len(records) >= 8 and all(r["ok"] and r["output_tokens"] == 40 for r in records)
    assert "did not come through the router" not in (run_dir / "decode" / "logs" / "sglang-node0.log").read_text()
    assert (run_dir / "logs" / "router.log").stat().st_size > 0
    # each role's table: the prefill role's extend steps, the decode role's decode steps
    prefill_d4 = (run_dir / "prefill" / "analysis" / "d4.md").read_text()
    decode_d4 = (run_dir / "decode" / "analysis" / "d4.md").read_text()
    assert "stage extend" in prefill_d4 and "deep_ep::intranode::dispatch" in prefill_d4, prefill_d4[-1500:]
    assert "stage decode" in decode_d4 and "found 4 layers (1 dense + 3 MoE)" in decode_d4, decode_d4[-1500:]
    table = (run_dir / "table.md").read_text()
    assert table.index("## prefill role") < table.index("## decode role") < table.index("## Time to first token")
    # the TTFT split over the load: every part observed for every request of the load (scraped before its first
    # request and after its last), the fake's 5 ms KV transfer read back
    parts = {p["name"]: p for p in json.loads((run_dir / "ttft_split.json").read_text())}
    assert {"bootstrap", "prefill queue", "prefill compute", "KV transfer", "wait before decode"} <= set(parts)
    assert {name: p["requests"] for name, p in parts.items()} == {name: len(records) for name in parts}
    assert parts["KV transfer"]["mean_ms"] == pytest.approx(5.0, abs=0.01)
    assert sorted(p.name for p in (run_dir / "metrics").iterdir()) == [
        "decode-end.prom", "decode-start.prom", "prefill-end.prom", "prefill-start.prom"]
    # a role's folder is a run directory: analyze reads it as the run did; the pair's folder says where they are
    assert_analyze_reproduces(run_dir / "decode", tmp_path / "again", capsys)
    capsys.readouterr()
    from harness.cli import main as cli_main
    assert cli_main(["analyze", str(run_dir), "--out", str(tmp_path / "pair")]) != 0
    assert f"{run_dir / 'prefill'}" in capsys.readouterr().err
    _no_secret_in(run_dir)


def test_a_pd_router_that_cannot_start_fails_the_run_with_its_log_and_leaves_no_server(cluster, env, tmp_path):
    """The router exits at start (an argument it refuses): the run fails in its phase with the router's own
    words, both roles' servers are stopped, and each role's folder still has its manifest and server log."""
    data = yaml.safe_load(_pd_scenario(tmp_path).read_text())
    data["engine"]["disaggregation"]["router"]["extra_args"] = ["--policy", "no_such_policy"]
    path = tmp_path / "pd_bad_router.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    status, run_dir = run(parse_scenario(path.read_text(), str(path)), path, tmp_path / "runs", quiet=True)
    manifest = _manifest(run_dir)
    assert (status, manifest["status"]) == (1, "failed")
    assert manifest["error"]["phase"] == "start the router"
    assert "router at http://" in manifest["error"]["message"] and "exited with status" in manifest["error"]["message"]
    assert "no_such_policy" in manifest["error"]["message"]  # the router's own complaint, from its log tail
    for role in ("prefill", "decode"):
        assert _manifest(run_dir / role)["status"] == "failed"
        assert (run_dir / role / "logs" / "sglang-node0.log").stat().st_size > 0
    assert not _fake_servers(), "a role's server outlived the failed run"
