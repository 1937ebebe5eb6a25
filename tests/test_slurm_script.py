"""cluster/slurm/moe-harness.sbatch, the real script, submitted to a two-node SLURM allocation on this
machine (tests/local_slurm.py: real slurmctld + two slurmd where SLURM runs here, else srun/scontrol
doubles): it starts Ray on both nodes, runs the README's `ray job submit` of the fake-SGLang 2-node
scenario (tests/test_run_sglang.py's) and stops Ray on exit.

Why: an admin's first multi-node run goes through this script; a node that never joins, a site
variable that never reaches the servers or a Ray left running on the allocation are found only there.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.local_slurm import Allocation, local_slurm
from tests.process_lookup import pids_using
from tests.ports import free_port_run

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "cluster" / "slurm" / "moe-harness.sbatch"
SCENARIO = REPO / "tests" / "scenarios" / "sglang_fake_2node.yaml"
BIN = Path(sys.executable).parent
GPUS_PER_NODE = 2
JOB_TIMEOUT_S = 400  # generous: Ray's start on a busy 2-core machine, then the job
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def allocation(sglang_sources):
    with local_slurm(GPUS_PER_NODE) as alloc:
        yield alloc



@pytest.fixture
def ray_tmpdir():
    """This test's own Ray temp dir (short: Ray's socket paths are length-limited); afterwards the
    processes still using it are Ray the script left running: killed here, reported by the test."""
    path = tempfile.mkdtemp(prefix="sr", dir="/tmp")
    yield path
    for pid in pids_using(path):
        os.kill(pid, 9)
    shutil.rmtree(path, ignore_errors=True)


def _job_env(tmp_path: Path, ray_tmpdir: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "MOE_HARNESS_RUNS_DIR"):
        env.pop(name, None)
    ports = free_port_run(3)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env['PATH']}",
        RAY_TMPDIR=ray_tmpdir,
        # Two Ray nodes on one host: each its own temp folder (one shared folder let the second node's
        # runtime-env agent unpack the job's working dir again under the running driver), and the
        # agents' HTTP ports must differ (0: Ray picks a free one).
        MOE_HARNESS_RAY_TEMP_DIR=ray_tmpdir,
        MOE_HARNESS_NODE_DIR=str(tmp_path / "nodes"),
        MOE_HARNESS_HEAD_IP="127.0.0.1",  # both "nodes" are this machine
        MOE_HARNESS_RAY_PORT=str(ports),
        MOE_HARNESS_DASHBOARD_PORT=str(ports + 1),
        MOE_HARNESS_RAY_HEAD_ARGS=f"--ray-client-server-port={ports + 2}",
        MOE_HARNESS_RAY_START_ARGS="--dashboard-agent-listen-port=0 --num-cpus=1",
        MOE_HARNESS_LOG_DIR=str(tmp_path / "logs"),
        MOE_HARNESS_RUNS_DIR=str(tmp_path / "runs"),
    )
    env.update(extra)
    return env


def _scenario(tmp_path: Path) -> Path:
    """The fake-SGLang 2-node scenario with free ports, written for this test."""
    data = yaml.safe_load(SCENARIO.read_text())
    data["engine"]["port"] = free_port_run(8)
    data["engine"]["dist_init_port"] = free_port_run(1)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _left_running(ray_tmpdir: str, grace_s: float = 30) -> list[str]:
    """Ray's processes still running `grace_s` after the job ended (the dashboard's module processes
    exit on their own a few seconds after their parent; a leak is what outlives that)."""
    deadline = time.monotonic() + grace_s
    while True:
        left = []
        for pid in pids_using(ray_tmpdir):
            with contextlib.suppress(OSError):
                left.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:120])
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


def test_sbatch_script_runs_the_scenario_on_two_ray_nodes_and_stops_ray(allocation: Allocation, tmp_path, ray_tmpdir):
    site_env = tmp_path / "site.env"
    # Synthetic site file: a variable the fake server reads (accepted tokens per verify step, 3 unless
    # set), so the run's measured accept length shows the servers inherited the site's variables.
    site_env.write_text("FAKE_SGLANG_ACCEPT=2\nNCCL_SOCKET_IFNAME=lo\n")
    out = tmp_path / "job.out"
    status = allocation.submit(SCRIPT, [str(_scenario(tmp_path))], _job_env(tmp_path, ray_tmpdir,
                               MOE_HARNESS_SITE_ENV=str(site_env)), out, REPO, GPUS_PER_NODE, JOB_TIMEOUT_S)
    output = out.read_text()
    assert status == 0, f"[{allocation.kind}] {output[-5000:]}"
    # GPUs per node from SLURM: the step on each node saw its 2 GPUs and Ray declared them; the head
    # ran with Ray's token authentication, the job's own token on every node and on the client.
    assert "Ray has every node alive: 2 nodes, 4 GPUs, authentication: token" in output, output[-3000:]
    assert "succeeded" in output
    runs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    run_dir = runs[0]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok", manifest.get("error")
    assert manifest["in_ray_job"] is True
    assert len({n["ray_node_id"] for n in manifest["nodes"]}) == 2  # one server on each SLURM node's Ray
    d4 = (run_dir / "analysis" / "d4.md").read_text()
    assert "| moe" in d4 and d4.strip().splitlines()[-1] in output  # the job printed the table it wrote
    summary = json.loads((run_dir / "load" / "summary.json").read_text())
    assert summary["accept_length"] == pytest.approx(2.0, abs=0.2)  # the site file reached the servers
    assert "Ray stopped on simnode1 simnode2" in output
    assert not _left_running(ray_tmpdir), "Ray processes left running after the job"
    for node in ("simnode1", "simnode2"):  # each node's Ray log, named by node, where the admin said
        logs = list((tmp_path / "logs").glob(f"moe-harness-*-ray-{node}.log"))
        assert len(logs) == 1 and "Ray runtime started" in logs[0].read_text(), (node, logs)


def test_nodes_not_alive_in_time_end_the_job_in_one_line_and_stop_ray(allocation: Allocation, tmp_path, ray_tmpdir):
    out = tmp_path / "job.out"
    env = _job_env(tmp_path, ray_tmpdir, MOE_HARNESS_RAY_WAIT_S="1", MOE_HARNESS_SITE_ENV=os.devnull)
    status = allocation.submit(SCRIPT, [str(_scenario(tmp_path))], env, out, REPO, GPUS_PER_NODE, JOB_TIMEOUT_S)
    output = out.read_text()
    assert status == 1, output[-3000:]
    errors = [line for line in output.splitlines() if " Ray nodes alive at " in line]
    assert re.fullmatch(r"moe-harness\.sbatch: [01] of 2 Ray nodes alive at http://127\.0\.0\.1:\d+ after 1 s "
                        r"\(MOE_HARNESS_RAY_WAIT_S\)( \(last answer: .+\))?; node logs in \S+", errors[0]), output[-3000:]
    assert not any((tmp_path / "runs").iterdir()), "a run started although Ray never had every node"
    assert output.rstrip().endswith("moe-harness.sbatch: Ray stopped on simnode1 simnode2"), output[-2000:]
    assert not _left_running(ray_tmpdir), "Ray processes left running after the failed start"


def test_a_missing_scenario_or_site_file_is_one_line_before_any_ray(allocation: Allocation, tmp_path, ray_tmpdir):
    out = tmp_path / "job.out"
    assert allocation.submit(SCRIPT, [], _job_env(tmp_path, ray_tmpdir), out, REPO, GPUS_PER_NODE, 120) == 1
    assert out.read_text().strip().splitlines()[-1].startswith(
        "moe-harness.sbatch: usage: sbatch --nodes=N cluster/slurm/moe-harness.sbatch SCENARIO")
    out.unlink()
    missing = tmp_path / "no-such-site.env"
    env = _job_env(tmp_path, ray_tmpdir, MOE_HARNESS_SITE_ENV=str(missing))
    assert allocation.submit(SCRIPT, ["demo"], env, out, REPO, GPUS_PER_NODE, 120) == 1
    assert out.read_text().strip().splitlines()[-1] == f"moe-harness.sbatch: MOE_HARNESS_SITE_ENV={missing}: no such file"
    assert not pids_using(ray_tmpdir)


def test_site_env_example_sets_the_variables_every_site_decides_and_none_set_per_run():
    """The SLURM example and the KubeRay ConfigMap are one list of site variables (the rules file)."""
    rules = yaml.safe_load((REPO / "cluster/kuberay/schema/site-env-rules.yaml").read_text())
    per_run = {name for group in yaml.safe_load((REPO / "harness/sglang/env_defaults.yaml").read_text()).values()
               for name in group}
    lines = [line for line in (REPO / "cluster/slurm/site.env.example").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    names = {}
    for line in lines:
        name, _, value = line.partition("=")
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name) and shlex.split(value) == [value], f"site.env.example: {line!r}"
        names[name] = value
    assert set(rules["required"]) <= set(names), set(rules["required"]) - set(names)
    refused = set(names) & (set(rules["deepep_sets"]) | per_run)
    assert not refused, f"site.env.example sets what a run sets itself: {sorted(refused)}"
    configmap = yaml.safe_load((REPO / "cluster/kuberay/site-env.yaml").read_text())["data"]
    assert set(names) == set(configmap), set(names) ^ set(configmap)
