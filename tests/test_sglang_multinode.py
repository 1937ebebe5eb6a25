"""End to end on a real 2-node Ray cluster with the fake SGLang server (speaking 0.5.23) started by the
real actors: plan -> node check -> placement -> one server per node -> steady load -> profile every rank."""
import asyncio
import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
import ray

from harness.load.background import BackgroundLoad
from harness.load.client import LoadRun, wait_for_running_batch
from harness.load.summary import load_records
from harness.run_errors import RunFailed
from harness.sglang.plan import DeploymentSpec, SpeculativeSpec, build_plan
from harness.sglang.profile import post_json, profile_decode, start_profile_body
from harness.sglang.server_actor import DeploymentError, launch
from tests.ports import free_port_run
from tests.ray_cluster import two_node_cluster

REPO = Path(__file__).resolve().parent.parent
FAKE = str(REPO / "tests" / "fake_sglang" / "server.py")
FAKE_PACKAGE = f"{REPO / 'tests' / 'fake_sglang'}:{REPO}"
pytestmark = pytest.mark.timeout(240)


def _spec(nodes=2, gpus=2, profiler="auto", **env):
    parallel = dict(dp=nodes * gpus, ep=nodes * gpus, dp_attention=True, moe_a2a_backend="deepep",
                    deepep_mode="low_latency") if nodes * gpus > 1 else {}
    return DeploymentSpec(model_path="fake/ds", nodes=nodes, gpus_per_node=gpus, host="127.0.0.1", port=free_port_run(8),
                          dist_init_port=free_port_run(1),
                          speculative=SpeculativeSpec("EAGLE", 2, 1, 3), launcher=(sys.executable, FAKE),
                          profiler=profiler, passthrough_env=(), **parallel,
                          env={"FAKE_SGLANG_STEP_MS": "10", "FAKE_SGLANG_NODE0_HOST": "127.0.0.1",
                               "PYTHONPATH": FAKE_PACKAGE, **env})


def _fake_servers():
    return [p for p in psutil.process_iter(["cmdline"]) if FAKE in (p.info["cmdline"] or [])]


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def _post(url, body=None):
    return post_json(url, body, 10.0)


@pytest.fixture(scope="module")
def cluster(sglang_sources):
    with two_node_cluster(gpus_per_node=2) as c:
        yield c


def test_two_nodes_launch_load_profile_collect(cluster, tmp_path):
    plan = build_plan(_spec(), environ={})
    dep = launch(plan, str(tmp_path / "logs"), ready_timeout_s=30)
    try:
        # one server per node, each with its own node rank, node 0's address as dist-init address
        pids = ray.get([a.pid.remote() for a in dep.actors])
        cmdlines = [psutil.Process(pid).cmdline() for pid in pids]
        assert [c[c.index("--node-rank") + 1] for c in cmdlines] == ["0", "1"]
        assert all(f"{dep.node0_ip}:{plan.spec.dist_init_port}" in c for c in cmdlines)
        # each node its own HTTP port: node r binds port + r (two nodes of one host must not share one)
        assert [c[c.index("--port") + 1] for c in cmdlines] == [str(plan.spec.port), str(plan.spec.port + 1)]
        assert {r: c["problems"] for r, c in dep.node_checks.items()} == {0: [], 1: []}

        load = BackgroundLoad(dep.url, 8, 8, 120, str(tmp_path / "load" / "requests.jsonl"))
        assert asyncio.run(wait_for_running_batch(dep.url, 8, timeout_s=20)) >= 8
        outcome = profile_decode(dep, load, str(tmp_path / "traces"), "run1", num_steps=3, timeout_s=30)
        load.stop_and_wait(30)
        info = json.loads(_get(dep.url + "/server_info"))
    finally:
        dep.stop()
    # profile V2's -decode files, renamed to the suffix the analysis reads
    assert [Path(p).name.split("-", 2)[2] for p in outcome.traces[0]] == \
        ["TP-0-DP-0-EP-0-DECODE.trace.json.gz", "TP-1-DP-1-EP-1-DECODE.trace.json.gz"]
    assert [Path(p).name.split("-", 2)[2] for p in outcome.traces[1]] == \
        ["TP-2-DP-2-EP-2-DECODE.trace.json.gz", "TP-3-DP-3-EP-3-DECODE.trace.json.gz"]
    records = load_records(str(tmp_path / "load" / "requests.jsonl"))
    assert records and all(r["ok"] and r["output_tokens"] == 120 for r in records)
    # the window on the load records' clock: opened after the load began, closed after it opened
    assert 0 < outcome.window_load_s[0] < outcome.window_load_s[1]
    assert max(r["start_s"] for r in records) < outcome.window_load_s[0]  # every request started before it
    # accept length over the profiled window: 3 tokens per verify step; the server's figure is cumulative
    assert outcome.accept_length == pytest.approx(3.0, abs=0.2)
    assert info["internal_states"][0]["avg_spec_accept_length"] < 2.5
    assert (tmp_path / "logs" / "sglang-node1.log").read_text().count("node 1/2") == 1
    assert not _fake_servers(), "a server process outlived the deployment"


def test_running_batch_counts_every_node_not_node0_metrics(cluster, tmp_path):
    """With DP attention on 2 nodes, node 0's /metrics shows only its own DP groups (node-local,
    one series per group); /v1/loads, which the harness reads, covers every DP rank."""
    dep = launch(build_plan(_spec(), environ={}), str(tmp_path / "logs"), ready_timeout_s=30)
    try:
        load = BackgroundLoad(dep.url, 8, 8, 400, str(tmp_path / "requests.jsonl"))
        assert asyncio.run(wait_for_running_batch(dep.url, 8, timeout_s=20)) == 8
        metrics = _get(dep.url + "/metrics")
        node0 = [line for line in metrics.splitlines() if line.startswith("sglang:num_running_reqs{")]
        assert len(node0) == 2 and all('dp_rank="0"' in l or 'dp_rank="1"' in l for l in node0)
        assert sum(float(l.rsplit(" ", 1)[1]) for l in node0) == 4  # half the batch: node 1 is not there
        load.stop()
    finally:
        dep.stop()


def test_classic_profiler_left_running_refuses_the_next_start_until_stopped(cluster, tmp_path):
    """SGLang's by-stage profiler: a capture the steps no longer finish stays in progress, and every
    /start_profile answers 500 (the reason only in the log) until /stop_profile; the harness stops it and
    starts again."""
    # 60 ms steps: the harness must meet the leftover capture before 3 new decode steps end it by themselves
    dep = launch(build_plan(_spec(nodes=1, gpus=1, profiler="v1", FAKE_SGLANG_STEP_MS="60"), environ={}),
                 str(tmp_path / "logs"), ready_timeout_s=30)
    try:
        body = start_profile_body(str(tmp_path / "traces"), 3, "p", "v1", "decode")
        assert _post(dep.url + "/start_profile", body)[0] == 200
        # one short request: a prefill (EXTEND capture starts), one decode step (EXTEND flushed, DECODE
        # capture starts), then nothing more runs: the DECODE capture never reaches its 3 steps
        done = _post(dep.url + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4}})
        assert done[0] == 200
        assert _post(dep.url + "/start_profile", body) == (500, "Internal Server Error")
        # the reason reaches the log through the server's output pipe, read by a thread: wait for it
        reason = "Profiling is already in progress. Call /stop_profile first."
        deadline = time.monotonic() + 10
        while reason not in ray.get(dep.actors[0].log_tail.remote()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reason in ray.get(dep.actors[0].log_tail.remote())
        # the harness (v1) meets the same 500, stops the leftover capture and starts again
        load = BackgroundLoad(dep.url, 2, 8, 120, str(tmp_path / "requests.jsonl"))
        outcome = profile_decode(dep, load, str(tmp_path / "traces"), "again", num_steps=3, timeout_s=30)
        load.stop_and_wait(30)
    finally:
        dep.stop()
    names = sorted(p.name.split("-", 2)[2] for p in (tmp_path / "traces").glob("p-*"))
    assert names == ["TP-0-EXTEND.trace.json.gz", "TP-0.trace.json.gz"]  # the leftover: never a DECODE file
    assert [Path(p).name.split("-", 2)[2] for p in outcome.traces[0]] == ["TP-0-DECODE.trace.json.gz"]
    assert (tmp_path / "logs" / "sglang-node0.log").read_text().count("Profiling is already in progress") == 2


def test_classic_profiler_with_the_harness_window_is_stopped_on_every_exit(cluster, tmp_path):
    """profile.sglang_profiler v1: the decode-only window gives DECODE traces, and /stop_profile follows even
    when the harness gives up, so the next profile starts."""
    dep = launch(build_plan(_spec(nodes=1, gpus=1, profiler="v1"), environ={}), str(tmp_path / "logs"),
                 ready_timeout_s=30)
    try:
        load = BackgroundLoad(dep.url, 4, 8, 400, str(tmp_path / "requests.jsonl"))
        asyncio.run(wait_for_running_batch(dep.url, 4, timeout_s=20))
        with pytest.raises((DeploymentError, RunFailed), match=r"node 0: no trace \(DECODE stage\) for rank\(s\) TP-0"):
            profile_decode(dep, load, str(tmp_path / "traces"), "slow", num_steps=100, timeout_s=0.5)
        load.resume()
        deadline = time.monotonic() + 20
        while len(load.records) < 5 and time.monotonic() < deadline:  # a new request, so a prefill, came
            time.sleep(0.05)
        time.sleep(0.1)
        outcome = profile_decode(dep, load, str(tmp_path / "traces"), "again", num_steps=3, timeout_s=30)
        load.stop_and_wait(30)
    finally:
        dep.stop()
    assert [Path(p).name.split("-", 2)[2] for p in outcome.traces[0]] == ["TP-0-DECODE.trace.json.gz"]
    assert outcome.stop_profile.startswith("HTTP 500")  # nothing left to stop: the capture ended itself
    assert list((tmp_path / "traces").glob("slow-*-TP-0.trace.json.gz")), "the abandoned capture was stopped"
    # SGLang's by-stage counters outlive /stop_profile: the next prefill started a capture of its own
    assert "Profiling starts for EXTEND." in (tmp_path / "logs" / "sglang-node0.log").read_text()


def test_v2_has_no_manual_stop_and_lower_case_stages(cluster, tmp_path):
    """Profile V2 (0.5.23 profile_utils.py): stages are lower case; /stop_profile kills the scheduler."""
    dep = launch(build_plan(_spec(nodes=1, gpus=1), environ={}), str(tmp_path / "logs"), ready_timeout_s=30)
    try:
        body = start_profile_body(str(tmp_path / "traces"), 2, "upper", "v2", "DECODE")
        assert _post(dep.url + "/start_profile", body)[0] == 200
        assert _post(dep.url + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 8}})[0] == 200
        assert not list((tmp_path / "traces").glob("upper-*")), "DECODE (upper case) matched a V2 stage"
        with pytest.raises((ConnectionError, urllib.error.URLError, OSError)):
            _post(dep.url + "/stop_profile")
        with pytest.raises(DeploymentError, match="exited with status 1(.|\n)*NotImplementedError"):
            for _ in range(50):  # the process is on its way out
                dep.check_alive()
                time.sleep(0.1)
    finally:
        dep.stop()


def test_generate_contract_gate_and_error_chunks_reach_the_records(cluster, tmp_path):
    """0.5.23 answers 400 to an unknown sampling key, and a mid-stream failure as a data: {"error"} chunk."""
    dep = launch(build_plan(_spec(nodes=1, gpus=1, FAKE_SGLANG_FAIL="error_chunk:2"), environ={}),
                 str(tmp_path / "logs"), ready_timeout_s=30)
    try:
        status, text = _post(dep.url + "/generate", {"text": "hi", "sampling_params": {"max_tokens": 4}})
        assert status == 400 and json.loads(text)["error"].startswith("unknown field `max_tokens`, expected one of")
        load = LoadRun(dep.url, 1, 8, 40, str(tmp_path / "requests.jsonl"), max_requests=3)
        asyncio.run(load.run())
    finally:
        dep.stop()
    records = load_records(str(tmp_path / "requests.jsonl"))
    assert [r["ok"] for r in records] == [True, False]  # the load stops at the first failure
    assert records[1]["error"] == ("server error in the stream after 1 token(s): The request was aborted: "
                                   "KV cache pool is full (fault injected)")


def test_openai_chunks_with_several_tokens_are_all_counted(cluster, tmp_path):
    """With MTP a /v1/completions chunk carries 3 tokens; usage.completion_tokens counts them."""
    dep = launch(build_plan(_spec(nodes=1, gpus=1), environ={}), str(tmp_path / "logs"), ready_timeout_s=30)
    try:
        load = LoadRun(dep.url, 2, 8, 40, str(tmp_path / "requests.jsonl"), api="completions", max_requests=4)
        asyncio.run(load.run())
    finally:
        dep.stop()
    records = load_records(str(tmp_path / "requests.jsonl"))
    assert len(records) == 4 and all(r["ok"] and r["output_tokens"] == 40 for r in records)
    assert all(len(r["itl_ms"]) == 39 for r in records)  # one gap per token after the first


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
        load = LoadRun(dep.url, 4, 8, 40, str(tmp_path / "requests.jsonl"))
        thread = threading.Thread(target=lambda: asyncio.run(load.run()), daemon=True)
        thread.start()
        thread.join(timeout=120)
        # On a busy machine the 6th request, and the server's exit after it, may come late: wait for
        # the death to be seen (generously), then check what it says.
        deadline, died = time.monotonic() + 120, None
        while died is None and time.monotonic() < deadline:
            try:
                dep.check_alive()
                time.sleep(0.5)
            except DeploymentError as exc:
                died = exc
        assert died is not None, "the server never died mid-load"
        assert re.search("node 0: SGLang server exited with status 4(.|\n)*scheduler died", str(died)), str(died)
    finally:
        dep.stop()
    records = load_records(str(tmp_path / "requests.jsonl"))
    assert any(r["ok"] for r in records) and any(not r["ok"] for r in records)  # earlier results kept

    plan = build_plan(_spec(FAKE_SGLANG_FAIL="no_profile_file", FAKE_SGLANG_FAIL_NODE="1"), environ={})
    dep = launch(plan, str(tmp_path / "logs2"), ready_timeout_s=30)
    try:
        load = BackgroundLoad(dep.url, 2, 8, 400, str(tmp_path / "r2.jsonl"))
        asyncio.run(wait_for_running_batch(dep.url, 2, timeout_s=20))
        with pytest.raises((DeploymentError, RunFailed),
                           match=r"node 1: no trace \(decode stage\) for rank\(s\) TP-2-DP-2-EP-2, TP-3-DP-3-EP-3"):
            profile_decode(dep, load, str(tmp_path / "traces"), "p", num_steps=2, timeout_s=4)
        load.stop_and_wait(30)
    finally:
        dep.stop()
    assert len(list((tmp_path / "traces").glob("p-*TP-0-*"))) == 1  # node 0's files are kept
    assert not _fake_servers()


def test_node_check_refuses_unknown_deprecated_and_mismatched_releases(cluster, tmp_path):
    """Each node's own SGLang parser judges the planned argv before any server starts."""
    spec = replace(_spec(FAKE_SGLANG_VERSION="0.5.17"), extra_args=("--enable-dp-attn", "--disable-cuda-graph"))
    plan = build_plan(spec, environ={})
    with pytest.raises(DeploymentError) as caught:
        launch(plan, str(tmp_path / "logs"), ready_timeout_s=30)
    text = str(caught.value)
    assert text.startswith("SGLang refuses the planned command; no server was started:")
    assert "node 0: SGLang 0.5.17 is installed, the plan is spelled for 0.5.23: run with --sglang-version 0.5.17" in text
    assert "node 1: --attn-dp-size (from engine.dp_attention): unknown: SGLang 0.5.17 says: not a flag" in text
    assert "node 0: --enable-dp-attn (from engine.extra_args): unknown: SGLang 0.5.17 says: not a flag" in text
    assert "node 0: --disable-cuda-graph (from engine.extra_args): deprecated: SGLang 0.5.17 says:" in text
    assert not (tmp_path / "logs").exists() and not _fake_servers()  # nothing was started


def test_a_node_file_comes_back_in_pieces_whole_and_a_pipe_is_refused(cluster, tmp_path):
    """A node's file travels in pieces (harness/node/node_files.py): never held whole by either side,
    the copy equal byte for byte; the actor reads only a regular file that way (a FIFO is refused)."""
    from harness.node.node_files import fetch_node_file
    from harness.sglang.server_actor import SGLangNodeActor

    actor = SGLangNodeActor.remote(0)
    source = tmp_path / "rank.trace.json.gz"
    data = bytes(range(256)) * (14 * 1024 + 7)  # 3.5 MiB and a bit: four pieces, the last short
    source.write_bytes(data)
    asked = []

    def read_piece(offset, size):
        asked.append((offset, size))
        return actor.read_file.remote(str(source), offset, size)

    copy = fetch_node_file(read_piece, tmp_path / "copy" / source.name, 60, piece_bytes=1 << 20)
    assert copy.read_bytes() == data
    assert [offset for offset, _ in asked] == [0, 1 << 20, 2 << 20, 3 << 20]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ray.exceptions.RayTaskError, match="only a regular file is read in pieces"):
        fetch_node_file(lambda offset, size: actor.read_file.remote(str(fifo), offset, size), tmp_path / "f", 60)
    assert not (tmp_path / "f").exists()
