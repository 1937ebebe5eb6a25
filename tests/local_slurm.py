"""A real SLURM on this one machine: munged, slurmctld and two slurmd (`slurmd -N`), each node declaring
GPUs as GRES without devices, all on private ports, sockets and folders; or, where SLURM cannot run
(not installed, not root), the `srun` / `scontrol` doubles of tests/slurm_shims.

Why real SLURM first: the sbatch script's promises are SLURM's behaviour (the node list, one job step
per node with `-w`, the GPU count a step sees, signals on stop); Debian's slurm-wlm runs two slurmd
on one host, so the test exercises SLURM itself, not a model of it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.ports import free_port_run

SHIMS = Path(__file__).resolve().parent / "slurm_shims"
NODES = ("simnode1", "simnode2")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch")
START_TIMEOUT_S = 60


FORCE_SHIMS_ENV = "MOE_HARNESS_TEST_SLURM_SHIMS"  # 1: the doubles even where SLURM runs (to test them)


def real_slurm_available() -> bool:
    return (os.environ.get(FORCE_SHIMS_ENV) != "1" and os.geteuid() == 0
            and all(shutil.which(tool) for tool in DAEMONS))


@dataclass
class Allocation:
    """How to submit the script: `sbatch --wait` against a real controller, or the script run directly
    with SLURM's job variables and the shims on PATH."""
    kind: str  # "slurm" or "shims"
    env: dict[str, str]

    def submit(self, script: Path, args: list[str], env: dict[str, str], out: Path, cwd: Path,
               gpus_per_node: int, timeout_s: float) -> int:
        env = {**env, **self.env}
        if self.kind == "slurm":
            cmd = ["sbatch", "--wait", f"--nodes={len(NODES)}", f"--gpus-per-node={gpus_per_node}",
                   f"--output={out}", str(script), *args]
        else:
            env.update(SLURM_JOB_NODELIST=",".join(NODES), SLURM_SUBMIT_DIR=str(cwd), SLURM_JOB_ID="1",
                       SLURM_CPUS_ON_NODE="1", SLURM_SHIM_GPUS_ON_NODE=str(gpus_per_node),
                       PATH=f"{SHIMS}{os.pathsep}{env['PATH']}")
            cmd = ["bash", str(script), *args]
        with open(out, "ab") as sink:
            return subprocess.run(cmd, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                  timeout=timeout_s).returncode


def _slurm_conf(root: Path, ctld_port: int, gpus_per_node: int) -> str:
    nodes = "\n".join(
        f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ctld_port + 1 + i} CPUs=1 "
        f"Gres=gpu:{gpus_per_node} State=UNKNOWN" for i, name in enumerate(NODES))
    return f"""ClusterName=moeharnesstest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SchedulerType=sched/builtin
GresTypes=gpu
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
KillWait=30
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmdSpoolDir={root}/spool/%n
StateSaveLocation={root}/state
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
{nodes}
PartitionName=test Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""


def _stop(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def local_slurm(gpus_per_node: int):
    """A two-node allocation source: real SLURM where it can run here, else the shims."""
    if not real_slurm_available():
        yield Allocation("shims", {})
        return
    root = Path(tempfile.mkdtemp(prefix="slurm", dir="/tmp"))
    for folder in ("state", *(f"spool/{n}" for n in NODES)):
        (root / folder).mkdir(parents=True)
    ctld_port = free_port_run(1 + len(NODES))
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, ctld_port, gpus_per_node))
    # GPUs declared by device files SLURM only names to the job (no cgroup here opens them): any
    # character devices do; SLURM counts a GPU per file.
    assert gpus_per_node == 2, "two stand-in device files"
    (root / "gres.conf").write_text(f"NodeName={NODES[0][:-1]}[1-{len(NODES)}] Name=gpu File=/dev/null,/dev/zero\n")
    env = {"SLURM_CONF": str(conf)}
    daemon_env = {**os.environ, **env}
    pid_files = [root / "munged.pid", root / "slurmctld.pid", *(root / f"slurmd-{n}.pid" for n in NODES)]
    try:
        key = root / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        subprocess.run(["munged", "--force", f"--key-file={key}", f"--socket={root}/munge.sock",
                        f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log",
                        f"--seed-file={root}/munged.seed"], check=True, env=daemon_env, timeout=30)
        subprocess.run(["slurmctld", "-i", "-f", str(conf)], check=True, env=daemon_env, timeout=30)
        for name in NODES:
            subprocess.run(["slurmd", "-f", str(conf), "-N", name], check=True, env=daemon_env, timeout=30)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            idle = subprocess.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], env=daemon_env, capture_output=True,
                                  text=True, timeout=30).stdout.strip()
            if idle == str(len(NODES)):
                break
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-1500:] for p in root.glob("*.log"))
                raise RuntimeError(f"local SLURM: {idle or 0} of {len(NODES)} nodes idle after {START_TIMEOUT_S} s\n{logs}")
            time.sleep(1)
        yield Allocation("slurm", env)
    finally:
        for pid_file in reversed(pid_files):
            _stop(pid_file)
        shutil.rmtree(root, ignore_errors=True)
