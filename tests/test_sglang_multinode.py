"""End to end on a real 2-node Ray cluster with the fake SGLang server started by the real actors:
plan -> placement -> one server per node -> steady load -> profile every rank -> collect."""
import asyncio
import socket
import sys
import threading
from pathlib import Path

import psutil
import pytest
import ray

from harness.load.client import LoadRun, spec_accept_length, wait_for_running_batch
from harness.load.summary import load_records, summarize
from harness.sglang.plan import DeploymentSpec, SpeculativeSpec, build_plan
from harness.sglang.profile import collect_traces, start_profile
from harness.sglang.server_actor import DeploymentError, launch
from tests.ray_cluster import two_node_cluster

REPO = Path(__file__).resolve().parent.parent
FAKE = str(REPO / "tests" / "fake_sglang" / "server.py")
pytestmark = pytest.mark.timeout(240)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spec(**env):
    return DeploymentSpec(model_path="fake/ds", nodes=2, gpus_per_node=2, dp=4, ep=4, dp_attention=True,
                          moe_a2a_backend="deepep", deepep_mode="low_latency", host="127.0.0.1",
                          port=_free_port(), speculative=SpeculativeSpec("EAGLE", 2, 1, 3),
                          launcher=(sys.executable, FAKE), env={"FAKE_SGLANG_STEP_MS": "10", "FAKE_SGLANG_NODE0_HOST": "127.0.0.1", **env},
                          passthrough_env=())


def _fake_servers():
    return [p for p in psutil.process_iter(["cmdline"]) if FAKE in (p.info["cmdline"] or [])]


@pytest.fixture(scope="module")
def cluster():
    with two_node_cluster(gpus_per_node=2) as c:
        yield c


def _run_load(url, concurrency, path, **kw):
    load = LoadRun(url, concurrency, input_len=8, output_len=40, records_path=str(path), **kw)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(load.run()), daemon=True)
    thread.start()
    return load, loop, thread


def test_two_nodes_launch_load_profile_collect(cluster, tmp_path):
    plan = build_plan(_spec(), environ={})
    dep = launch(plan, str(tmp_path / "logs"), ready_timeout_s=30)
    try:
        # one server per node, each with its own node rank, node 0's address as dist-init address
        pids = ray.get([a.pid.remote() for a in dep.actors])
        cmdlines = [psutil.Process(pid).cmdline() for pid in pids]
        assert [c[c.index("--node-rank") + 1] for c in cmdlines] == ["0", "1"]
        assert all(f"{dep.node0_ip}:5000" in c for c in cmdlines)

        load, loop, thread = _run_load(dep.url, 8, tmp_path / "load" / "requests.jsonl")
        assert asyncio.run(wait_for_running_batch(dep.url, 8, timeout_s=20)) >= 8
        start_profile(dep.url, str(tmp_path / "traces"), num_steps=3, prefix="run1")
        traces = collect_traces(dep, str(tmp_path / "traces"), "run1", timeout_s=30)
        accept = asyncio.run(spec_accept_length(dep.url))
        loop.call_soon_threadsafe(load.stop)
        thread.join(timeout=30)
    finally:
        dep.stop()
    assert [Path(p).name.split("-", 2)[2] for p in traces[0]] == \
        ["TP-0-DP-0-EP-0-DECODE.trace.json.gz", "TP-1-DP-1-EP-1-DECODE.trace.json.gz"]
    assert [Path(p).name.split("-", 2)[2] for p in traces[1]] == \
        ["TP-2-DP-2-EP-2-DECODE.trace.json.gz", "TP-3-DP-3-EP-3-DECODE.trace.json.gz"]
    records = load_records(str(tmp_path / "load" / "requests.jsonl"))
    assert records and all(r["ok"] and r["output_tokens"] == 40 for r in records)
    summary = summarize(records, num_gpus=4, accept_length=accept)
    assert summary["accept_length"] == pytest.approx(2.6)
    assert summary["ttft_ms"]["p50"] > 0 and summary["tpot_ms"]["p50"] >= 5  # 10 ms fake step time
    assert (tmp_path / "logs" / "sglang-node1.log").read_text().count("node 1/2") == 1
    assert not _fake_servers(), "a server process outlived the deployment"


@pytest.mark.parametrize("fail,node,message", [
    ("exit_at_start", "1", r"node 1: (SGLang )?server exited with status 3(.|\n)*fake startup failure"),
    ("hang_ready", "0", r"node 0: server not ready after 3 s"),
])
def test_startup_failures_end_at_once_with_the_node_log(cluster, tmp_path, fail, node, message):
    plan = build_plan(_spec(FAKE_SGLANG_FAIL=fail, FAKE_SGLANG_FAIL_NODE=node), environ={})
    with pytest.raises(DeploymentError, match=message):
        launch(plan, str(tmp_path / "logs"), ready_timeout_s=3)
    assert not _fake_servers()


def test_death_mid_load_and_missing_profile_file(cluster, tmp_path):
    plan = build_plan(_spec(FAKE_SGLANG_FAIL="die_mid_load:6", FAKE_SGLANG_FAIL_NODE="0"), environ={})
    dep = launch(plan, str(tmp_path / "logs"), ready_timeout_s=30)
    try:
        load, loop, thread = _run_load(dep.url, 4, tmp_path / "requests.jsonl")
        thread.join(timeout=30)
        with pytest.raises(DeploymentError, match="node 0: SGLang server exited with status 4(.|\n)*scheduler died"):
            dep.check_alive()
    finally:
        dep.stop()
    records = load_records(str(tmp_path / "requests.jsonl"))
    assert any(r["ok"] for r in records) and any(not r["ok"] for r in records)  # earlier results kept

    plan = build_plan(_spec(FAKE_SGLANG_FAIL="no_profile_file", FAKE_SGLANG_FAIL_NODE="1"), environ={})
    dep = launch(plan, str(tmp_path / "logs2"), ready_timeout_s=30)
    try:
        load, loop, thread = _run_load(dep.url, 2, tmp_path / "r2.jsonl")
        start_profile(dep.url, str(tmp_path / "traces"), num_steps=2, prefix="p")
        with pytest.raises(DeploymentError, match=r"node 1: no trace for rank\(s\) TP-2-DP-2-EP-2, TP-3-DP-3-EP-3"):
            collect_traces(dep, str(tmp_path / "traces"), "p", timeout_s=4)
        loop.call_soon_threadsafe(load.stop)
        thread.join(timeout=30)
    finally:
        dep.stop()
    assert len(list((tmp_path / "traces").glob("p-*TP-0-*"))) == 1  # node 0's files are kept
    assert not _fake_servers()
