"""The main job through a real Ray head: `ray job submit ... python harness/run.py --scenario demo`.

One head (`ray start --head` on free ports, its own temp dir) serves every test in this file; it is
stopped by killing exactly the processes it started.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.run_dir_reanalysis import assert_analyze_reproduces
from tests.process_lookup import stop_ray_head
from tests.ports import free_port_run

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# On a 2-core machine with another process on one core the head never took a job within 90 s: the
# old probe ran `ray job list` and `ray job submit` every 2 s, each an interpreter importing Ray
# (2.4 CPU-seconds each), so the probing alone used more than the one core the starting agent needed.
# Each probe is now one HTTP request, and the wait is long enough for a machine that is busy.
START_TIMEOUT_S = 300
PROBE_TIMEOUT_S = 20
JOB_TIMEOUT_S = 150
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the head is on loopback


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["RAY_AUTH_MODE"] = "disabled"  # a private loopback head: no token to distribute
    env.pop("RAY_ADDRESS", None)
    env.update(extra)
    return env


class RayHead:
    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="rh", dir="/tmp")  # short: Ray's socket paths are length-limited
        base = free_port_run(3)  # the GCS, the dashboard and the client server: three free ports, never one twice
        self.gcs_port, self.dashboard_port, self.client_port = base, base + 1, base + 2
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        self.gcs = f"127.0.0.1:{self.gcs_port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [
            str(BIN / "ray"), "start", "--head", "--block", f"--port={self.gcs_port}", "--node-ip-address=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
            f"--temp-dir={self.temp_dir}", "--num-cpus=2", "--num-gpus=0", "--disable-usage-stats",
            f"--ray-client-server-port={self.client_port}",
        ]
        self.proc = subprocess.Popen(
            cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        started = time.monotonic()
        deadline = started + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited with {self.proc.returncode}")
            if self._agent_takes_jobs():
                self.took_s = time.monotonic() - started
                return
            time.sleep(2)
        raise RuntimeError(f"Ray head did not take jobs on {self.dashboard} within {START_TIMEOUT_S} s: "
                           f"{getattr(self, 'last_probe', '')}")

    def _agent_takes_jobs(self) -> bool:
        """The dashboard answers before submissions work: they need the node's dashboard agent registered
        (else "No available agent to submit job"). Submit a no-op job through the dashboard's REST API."""
        request = urllib.request.Request(
            f"{self.dashboard}/api/jobs/", data=json.dumps({"entrypoint": "true"}).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )
        try:
            with _NO_PROXY.open(request, timeout=PROBE_TIMEOUT_S) as answer:
                return 200 <= answer.status < 300
        except urllib.error.HTTPError as refused:  # the head runs but cannot take the job yet
            self.last_probe = f"HTTP {refused.code}: {refused.read()[-1500:].decode(errors='replace')}"
        except (OSError, TimeoutError) as not_up:  # not listening yet
            self.last_probe = repr(not_up)
        return False

    def stop(self) -> None:
        if self.proc is not None:
            stop_ray_head(self.proc, self.temp_dir)


@pytest.fixture(scope="session")
def ray_head():
    head = RayHead()
    try:
        head.start()
        yield head
    finally:
        head.stop()


def _submit(head: RayHead, *args: str) -> subprocess.CompletedProcess[str]:
    """`ray job submit`; while the head's job agent has not registered yet (Ray answers "No available
    agent to submit job, please try again later" before any job starts), try again, for up to a minute."""
    cmd = [
        str(BIN / "ray"), "job", "submit", "--address", head.dashboard, "--working-dir", ".",
        "--", "python", "harness/run.py", *args,
    ]
    deadline = time.monotonic() + 60
    while True:
        done = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        if "No available agent to submit job" not in done.stderr + done.stdout or time.monotonic() > deadline:
            return done
        time.sleep(3)


def _run_driver(head: RayHead, *args: str) -> subprocess.CompletedProcess[str]:
    """harness/run.py as a plain script connecting to the head through RAY_ADDRESS."""
    return subprocess.run(
        [sys.executable, "harness/run.py", *args], cwd=REPO, env=_env(RAY_ADDRESS=head.gcs),
        capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
    )


def _only_run_dir(root: Path) -> Path:
    dirs = [p for p in root.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _d4_rows(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines() if line.startswith("|")]


@pytest.mark.timeout(400)
def test_demo_through_ray_job_submit(ray_head: RayHead, tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    done = _submit(ray_head, "--scenario", "demo", "--runs-dir", str(runs))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "succeeded" in output
    run_dir = _only_run_dir(runs)
    assert re.fullmatch(r"demo-\d{8}-\d{6}", run_dir.name)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "ok" and manifest["in_ray_job"] is True
    listed = {f["path"]: f for f in manifest["files"]}
    for expected in ("scenario.yaml", "engine.log", "load/requests.jsonl", "load/steps.jsonl",
                     f"traces/{run_dir.name}-TP-0-DECODE.trace.json.gz", "analysis/d4.md", "analysis/kernels_long.parquet"):
        assert expected in listed, (expected, sorted(listed))
        assert listed[expected]["bytes"] == (run_dir / expected).stat().st_size
    from harness.run_dir import sha256_of

    assert all(sha256_of(run_dir / p) == f["sha256"] for p, f in listed.items())
    requests = [json.loads(line) for line in (run_dir / "load/requests.jsonl").read_text().splitlines()]
    assert len(requests) == 4 and all(r["completed"] and r["output_len"] == 40 for r in requests)
    assert "built DeepseekV3ForCausalLM" in (run_dir / "engine.log").read_text()

    # The D4 table printed by the job is the one written to the run directory.
    d4 = (run_dir / "analysis" / "d4.md").read_text()
    assert d4.strip().splitlines()[-1] in output
    rows = _d4_rows(d4)
    text = d4.lower()
    for group in ("attention", "gate", "moe"):
        assert group in text, group
    # Every layer (4 in the tiny preset) appears in the long table, each with positive time.
    import pyarrow.parquet as pq

    long_rows = pq.read_table(run_dir / "analysis" / "kernels_long.parquet").to_pylist()
    per_layer: dict[int, float] = {}
    for row in long_rows:
        if row["section"] == "layer":
            per_layer[row["layer"]] = per_layer.get(row["layer"], 0.0) + row["busy_us"]
    assert sorted(per_layer) == [0, 1, 2, 3]
    assert all(v > 0 for v in per_layer.values())
    groups_by_layer = {}
    for row in long_rows:
        if row["section"] == "layer":
            groups_by_layer.setdefault(int(row["layer"]), set()).add(row["group"])
    assert "mlp" in groups_by_layer[0] and "gate" not in groups_by_layer[0]  # first_k_dense_replace = 1
    assert all({"attention", "gate", "moe"} <= groups_by_layer[i] for i in (1, 2, 3))
    assert rows, d4
    # The printed table: per-layer numbers positive, each group's sum row the sum of its rows,
    # and the layers' wall time within the step's.
    body = rows[2:]  # after the header and the separator
    step_ms = float(next(r for r in body if r[0].startswith("end-to-end"))[3].removesuffix("ms"))
    layers_ms = float(next(r for r in body if r[0].startswith("all 4 layers"))[3].removesuffix("ms"))
    assert 0 < layers_ms <= step_ms
    members: dict[str, list[float]] = {}
    sums: dict[str, float] = {}
    for group, module, _kernel, value in (r[:4] for r in body):
        if group in ("attention", "gate", "moe", "mlp", "other", "unattributed"):
            if module == "sum":
                sums[group] = float(value)
            else:
                assert float(value) > 0, (group, module, value)
                members.setdefault(group, []).append(float(value))
    assert {"attention", "gate", "moe"} <= set(sums)
    for group, total in sums.items():
        assert total == pytest.approx(sum(members[group]), abs=0.05 * len(members[group]) + 0.05), group

    # `moe-harness analyze RUN` analyses the kept trace again as the job did: the same files and table.
    assert_analyze_reproduces(run_dir, tmp_path / "again", capsys)

    # `moe-harness report RUN` reads the run's analysis/ and writes the kernel report beside it.
    import argparse

    from harness.commands import report

    parser = argparse.ArgumentParser()
    report.register(parser.add_subparsers())
    args = parser.parse_args(["report", str(run_dir), "--top", "5"])
    assert args.func(args) == 0
    kr = (run_dir / "analysis" / "kernel_report.md").read_text()
    assert f"Sources: `{run_dir / 'analysis' / 'kernels_long.parquet'}`" in kr
    assert "### Stage: decode (3 step windows" in kr  # the 3 profiled steps, not the whole trace
    assert "### Each row 2x faster" in kr and f"| {step_ms:.2f} |" in kr
    assert "No SOL columns: model 'deepseek-v3-tiny' has no SOL shapes" in output
    assert (run_dir / "analysis" / "kernel_report.html").stat().st_size > len(kr)


@pytest.mark.timeout(300)
def test_actor_crash_fails_the_run_and_keeps_files(ray_head: RayHead, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = _run_driver(ray_head, "--scenario", "tests/scenarios/crash.yaml", "--runs-dir", str(runs))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the engine actor died during decode" in done.stderr
    run_dir = _only_run_dir(runs)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "failed"
    assert manifest["error"]["phase"] == "warm up to steady state"
    log = (run_dir / "engine.log").read_text()
    assert "built DeepseekV3ForCausalLM" in log and "prefill" in log  # collected before the crash
    assert {f["path"] for f in manifest["files"]} >= {"scenario.yaml", "engine.log", "scenario.source.yaml"}
    assert not (run_dir / "traces").exists()


@pytest.mark.timeout(300)
def test_no_steady_state_and_second_run_does_not_overwrite(ray_head: RayHead, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = _run_driver(ray_head, "--scenario", "tests/scenarios/no_steady.yaml", "--runs-dir", str(runs))
    second = _run_driver(ray_head, "--scenario", "tests/scenarios/no_steady.yaml", "--runs-dir", str(runs))
    for done in (first, second):
        assert done.returncode == 1, done.stdout + done.stderr
        assert "never reached steady state within 8 steps" in done.stderr
    dirs = sorted(p for p in runs.iterdir() if p.is_dir())
    assert len(dirs) == 2
    manifests = [_manifest(d) for d in dirs]
    assert all(m["status"] == "failed" and len(m["warmup_step_ms"]) == 8 for m in manifests)
    assert manifests[0]["run_dir"] != manifests[1]["run_dir"]
    assert manifests[0]["started_at"] != manifests[1]["started_at"]


@pytest.mark.timeout(300)
def test_profile_without_trace_fails_clearly(ray_head: RayHead, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = _run_driver(ray_head, "--scenario", "tests/scenarios/no_trace.yaml", "--runs-dir", str(runs))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the profile wrote no trace" in done.stderr
    run_dir = _only_run_dir(runs)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "failed"
    assert len(manifest["warmup_step_ms"]) >= 6  # warm-up data collected before the failure is kept
    assert "fault injection: trace export skipped" in (run_dir / "engine.log").read_text()


class DriverHead(RayHead):
    """A head for plain drivers (RAY_ADDRESS), which need no job agent: ready once its dashboard answers."""

    def _agent_takes_jobs(self) -> bool:
        return True


@pytest.fixture(scope="session")
def driver_head():
    head = DriverHead()
    try:
        head.start()
        yield head
    finally:
        head.stop()


DEMO_PHASES = ("connect to Ray", "start engine", "prefill", "warm up to steady state", "profile 3 decode steps",
               "finish requests", "analyse traces")


def _interrupted_run(head: RayHead, runs: Path, phase: str, signals: list[int]) -> tuple[int, str, list[str]]:
    """The demo as a plain driver, sent `signals` (0.2 s apart) as soon as it prints that `phase` starts;
    returns (exit status, stderr, the phases it had started when the first signal went)."""
    proc = subprocess.Popen([sys.executable, "harness/run.py", "--scenario", "demo", "--runs-dir", str(runs)],
                            cwd=REPO, env=_env(RAY_ADDRESS=head.gcs), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    lines, started = [], []
    try:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("> "):
                started.append(line[2:].rsplit(" ...", 1)[0])
            if started and started[-1] == phase:
                for sig in signals:
                    proc.send_signal(sig)
                    time.sleep(0.2)
                break
        lines += proc.stderr.readlines()
        return proc.wait(timeout=JOB_TIMEOUT_S), "".join(lines), started
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("phase", DEMO_PHASES)
def test_sigint_in_each_phase_leaves_a_true_manifest_and_keeps_what_was_collected(driver_head, tmp_path, phase):
    status, err, started = _interrupted_run(driver_head, tmp_path, phase, [signal.SIGINT])
    assert status == 130, err
    assert started[-1] == phase, err  # the demo reached the phase before the signal went
    run_dir = _only_run_dir(tmp_path)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "interrupted" and manifest["error"]["signal"] == "SIGINT"
    # the phase the run was in: the last one it had started when it stopped (a fast phase may have ended
    # between the line and the signal, so the next one is the truth then)
    last_started = [line[2:].rsplit(" ...", 1)[0] for line in err.splitlines() if line.startswith("> ")][-1]
    assert manifest["error"]["phase"] == last_started, err
    assert "Traceback" not in err and f"run interrupted by SIGINT during {last_started}" in err
    kept = {f["path"] for f in manifest["files"]}
    assert {"scenario.yaml", "scenario.source.yaml"} <= kept
    assert all((run_dir / path).is_file() for path in kept)
    assert manifest["kept"] and not (run_dir / ".running").exists()
    reached = DEMO_PHASES.index(last_started)
    if reached >= DEMO_PHASES.index("warm up to steady state"):  # the batch's request records so far are written
        records = [json.loads(line) for line in (run_dir / "load" / "requests.jsonl").read_text().splitlines()]
        assert len(records) == 4 and all(r["output_len"] >= 1 for r in records), records  # demo: batch_size 4
        if reached < DEMO_PHASES.index("finish requests"):
            assert not any(r["completed"] for r in records)
    if reached > DEMO_PHASES.index("warm up to steady state"):  # the step times so far are written
        steps = (run_dir / "load" / "steps.jsonl").read_text().splitlines()
        assert len(steps) >= len(manifest["warmup_step_ms"]) > 0
    if reached > DEMO_PHASES.index("profile 3 decode steps"):  # the trace came back: it is kept
        assert any(p.startswith("traces/") for p in kept)
    prom = (run_dir / "metrics.prom").read_text()
    assert 'status="interrupted"} 1.0' in prom and re.search(r'harness_version="\d[^"]*"', prom), prom
    engine_version = re.search(r'engine="embedded",engine_version="([^"]*)"', prom).group(1)
    if reached > DEMO_PHASES.index("start engine"):  # the engine answered: its torch is the engine's version
        assert re.fullmatch(r"\d+\.\d+\S*", engine_version) and engine_version == manifest["versions"]["torch (engine)"]


def test_a_second_sigterm_during_clean_up_still_leaves_the_manifest(driver_head, tmp_path):
    status, err, _ = _interrupted_run(driver_head, tmp_path, "start engine", [signal.SIGTERM, signal.SIGTERM])
    assert status == 143, err
    manifest = _manifest(_only_run_dir(tmp_path))
    assert manifest["status"] == "interrupted" and manifest["error"]["signal"] == "SIGTERM"
    assert manifest["error"]["phase"] == "start engine"
    assert "Traceback" not in err
