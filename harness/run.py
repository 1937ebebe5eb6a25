"""The main job: `python harness/run.py --scenario demo` (also `moe-harness run`, or a Ray job).

Launch the engine through Ray (the embedded engine in one actor, or SGLang on every node), drive the
batch to a steady state, profile a bounded number of decode steps on every rank, collect into a new
run directory, analyse, print the D4 table. Both engines go through the same stages
(harness/engines/base.py, called in order by harness/stages.py's run_stages); this module owns the
run directory, the manifest's run-level keys and the error record.
Every phase's output is written as soon as it exists; manifest.json, written last, says whether
the run finished (status ok) or where it stopped (status failed) and why. SIGINT and SIGTERM end it
with status interrupted, the phase and what was kept (harness/interrupts.py), exit 130 / 143.
"""
from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (`python harness/run.py`): import from the repo root
    _REPO = Path(__file__).resolve().parent.parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _REPO / "harness"]
    sys.path.insert(0, str(_REPO))

import argparse
import os
import platform
import time
import traceback
from dataclasses import dataclass
from typing import Any

from harness.engines.base import RunContext
from harness.engines.registry import engine_for
from harness.interrupts import InterruptGuard, as_interrupted, signals_held
from harness.progress import Progress
from harness.run_dir import (
    RUNS_DIR_ENV,
    create_run_dir,
    default_runs_root,
    file_inventory,
    in_ray_job,
    write_atomic,
    write_manifest,
)
from harness.output_dir import OutputError, check_destination_folder
from harness.run_errors import RunFailed
from harness.run_owner import claim as claim_run_dir, release as release_run_dir
from harness.run_secrets import run_secrets
from harness.scenario import REPO_ROOT, Scenario, ScenarioError, load_scenario, read_scenario_text, scenario_to_yaml
from harness.stages import run_stages
from harness.steady_state import NotSteadyError

# Kept out of the code Ray uploads for actors when the driver is not already a Ray job.
RUNTIME_ENV_EXCLUDES = [".git", ".venv", "runs", "**/__pycache__", ".pytest_cache", "*.egg-info", "build", "dist"]


def code_runtime_env(repo_root: Path) -> dict[str, Any]:
    """What Ray ships to the cluster's workers so they run this code: the checkout (working_dir), or,
    for an installed wheel (no pyproject.toml beside the packages: repo_root is site-packages), the
    two packages themselves, never the whole environment they are installed in."""
    installed = not (repo_root / "pyproject.toml").is_file() and all(
        (repo_root / package / "__init__.py").is_file() for package in ("analysis", "harness"))
    if installed:
        return {"py_modules": [str(repo_root / "analysis"), str(repo_root / "harness")], "excludes": RUNTIME_ENV_EXCLUDES}
    return {"working_dir": str(repo_root), "excludes": RUNTIME_ENV_EXCLUDES}


def connect_ray(repo_root: Path, progress: Progress) -> Any:
    """An existing cluster (inside a Ray job, or RAY_ADDRESS set), else a local Ray started here."""
    import ray

    from harness.ray_token_auth import check_cluster_takes_client

    if ray.is_initialized():  # run() called from a program (or test) already connected to a cluster
        progress.note("using this process's Ray connection")
        return ray
    check_cluster_takes_client(os.environ.get("RAY_ADDRESS"))  # a token the head wants: one line, not a 20 s retry
    if in_ray_job():
        ray.init(log_to_driver=False)  # the job's runtime env (working_dir) already carries the code
        progress.note(f"inside a Ray job; cluster at {os.environ.get('RAY_ADDRESS', 'auto')}")
    elif os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False, runtime_env=code_runtime_env(repo_root))
        progress.note(f"connected to the Ray cluster at {os.environ['RAY_ADDRESS']}")
    else:
        ray.init(
            address="local",  # a new instance: never join some other local cluster by accident
            log_to_driver=False,
            include_dashboard=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(repo_root)}},
        )
        progress.note("started a local Ray instance (set RAY_ADDRESS to use a cluster)")
    return ray


def _versions(engine_info: dict[str, Any] | None) -> dict[str, Any]:
    versions: dict[str, Any] = {"python": platform.python_version()}
    for module in ("ray", "transformers", "pydantic", "msgspec"):
        try:
            versions[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001 - a missing optional package is simply not listed
            pass
    try:
        from importlib.metadata import version

        versions["moe-harness"] = version("moe-harness")
    except Exception:  # noqa: BLE001
        pass
    if engine_info:
        versions["torch (engine)"] = engine_info.get("torch")
    return versions


@dataclass
class MetricsOptions:
    """Prometheus output of a run: a live progress endpoint while it runs, a push when it ends."""

    pushgateway: str | None = None
    push_job: str = "moe_harness"
    delete_old_groups: bool = False
    live_port: int | None = None  # None: no live endpoint; 0: any free port


def run(scenario: Scenario, scenario_path: Path, runs_root: Path, quiet: bool = False,
        metrics: MetricsOptions | None = None, sglang_version: str | None = None) -> tuple[int, Path]:
    """Run a scenario; returns (exit status, run directory). Never raises for a failed run.

    sglang_version: the SGLang release an sglang scenario is planned for (None: the one installed on the nodes)."""
    metrics = metrics or MetricsOptions()
    progress = Progress(quiet=quiet)
    secrets = run_secrets(scenario, os.environ, metrics.pushgateway)
    progress.hide(secrets.text)  # every value that is a secret, by value, on the console and in every file below
    started_at = time.time()
    guard = InterruptGuard()
    guard.quiet()  # during set-up a signal is noted; the run's first step raises it, with a manifest to write
    guard.install()
    run_dir = create_run_dir(runs_root, scenario.name, started_at)
    claim_run_dir(run_dir)  # until the manifest is written, `metrics` sees a live run here
    progress.console.print(f"run directory: {run_dir}")
    live = _start_live_exporter(scenario, run_dir, metrics, progress)
    write_atomic(run_dir / "scenario.yaml", scenario_to_yaml(scenario, secrets))
    write_atomic(run_dir / "scenario.source.yaml", secrets.yaml(read_scenario_text(scenario_path)))
    manifest: dict[str, Any] = {
        "status": "failed",
        "scenario": scenario.name,
        "scenario_source": str(scenario_path),
        "run_dir": str(run_dir),
        "started_at": started_at,
        "engine": scenario.engine.kind,
        "in_ray_job": in_ray_job(),
    }
    exit_status = 1
    expected: tuple[type[BaseException], ...] = (RunFailed, NotSteadyError)  # shown as is, no traceback

    seen: list[BaseException] = []  # the interrupts recorded (one reaches here twice: run_stages, then below)

    def interrupted(raised: BaseException) -> None:
        """Status interrupted with the phase, written at once (before clean-up, which a second signal may cut)."""
        nonlocal exit_status
        if any(raised is s for s in seen):
            return
        seen.append(raised)
        exc = as_interrupted(raised, guard.last_signal)
        if manifest["status"] != "interrupted":
            exit_status = exc.exit_status
            manifest["status"] = "interrupted"
            phase = progress.current or "set-up"
            manifest["error"] = {"phase": phase, "signal": exc.name, "message": f"interrupted by {exc.name} during {phase}"}
            with signals_held():
                write_manifest(run_dir, manifest, secrets.data)
        else:
            manifest["error"]["cleanup_cut_short_by"] = exc.name

    try:
        guard.arm()  # a signal noted during set-up is raised here
        with progress.phase("connect to Ray"):
            ray = connect_ray(REPO_ROOT, progress)
            guard.install()  # after ray.init, whose handlers would end the process in Ray's own code
            guard.arm()  # a signal raised while an import ran is reported by Python, not raised: raise it now
            manifest["ray_nodes"] = len([n for n in ray.nodes() if n.get("Alive")])
        engine = engine_for(RunContext(scenario, run_dir, manifest, progress), sglang_version=sglang_version)
        expected += engine.expected_errors
        table = run_stages(engine, on_interrupt=interrupted)
        write_atomic(run_dir / "table.md", table)  # the D4 table with the run's notes under it, as printed
        manifest["status"] = "ok"
        exit_status = 0
        print(table, flush=True)
    except KeyboardInterrupt as exc:  # Interrupted, or Ray's re-raise of it
        interrupted(exc)
    except expected as exc:
        manifest["error"] = {"phase": progress.current, "message": str(exc)}
        progress.console.print(f"[red]run failed[/red] during {progress.current}: {exc}")
    except Exception as exc:  # noqa: BLE001 - any failure must still leave a manifest behind
        manifest["error"] = {"phase": progress.current, "message": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc()}
        progress.console.print(f"[red]run failed[/red] during {progress.current}: {type(exc).__name__}: {exc}")
    finally:
        guard.quiet()  # a signal from here on is noted, not raised: the manifest is being finished
        manifest["versions"] = _versions(manifest.get("engine_info"))
        manifest["timings_s"] = progress.timings_s
        manifest["finished_at"] = time.time()
        manifest["wall_s"] = round(manifest["finished_at"] - started_at, 3)
        if manifest["status"] == "interrupted":
            manifest["kept"] = kept_files(run_dir)
            progress.console.print(f"[red]run interrupted[/red] by {manifest['error']['signal']} during "
                                   f"{manifest['error']['phase']}; kept: {', '.join(manifest['kept']) or 'nothing'}")
        if live is not None:
            live.update(phase="done" if manifest["status"] == "ok" else "failed")
            live.stop()
        with signals_held():
            write_manifest(run_dir, manifest, secrets.data)  # first, so metrics.prom reads the run's versions and status
        manifest["metrics"] = secrets.data(_push_metrics(run_dir, manifest["status"], metrics, progress))
        with signals_held():
            write_manifest(run_dir, manifest, secrets.data)
        release_run_dir(run_dir)
        guard.restore()
        progress.console.print(f"manifest: {run_dir / 'manifest.json'} (status {manifest['status']})")
    return exit_status, run_dir


def kept_files(run_dir: Path) -> list[str]:
    """What an interrupted run keeps, as 'folder/ (N files)' or a file name, for the manifest and the last line."""
    counts: dict[str, int] = {}
    for entry in file_inventory(run_dir):
        top, sep, _ = entry["path"].partition("/")
        key = f"{top}/" if sep else top
        counts[key] = counts.get(key, 0) + 1
    return [f"{k} ({n} files)" if k.endswith("/") else k for k, n in sorted(counts.items())]


def _start_live_exporter(scenario: Scenario, run_dir: Path, metrics: MetricsOptions, progress: Progress):
    if metrics.live_port is None:
        return None
    try:
        from harness.metrics.live import LiveProgressExporter

        live = LiveProgressExporter(scenario.name, run_dir.name, port=metrics.live_port, addr="0.0.0.0").start()
    except Exception as exc:  # noqa: BLE001 - metrics are a side channel: warn, never fail the run
        progress.console.print(f"[yellow]warning[/yellow]: live metrics endpoint not started: {exc}")
        return None
    progress.listeners.append(lambda name: _report_phase(live, name))
    progress.count_listeners.append(lambda done, running: _report_counts(live, done, running))
    progress.note(f"live metrics: {live.url}")
    return live


# Progress phase names (free text) -> the live exporter's bounded phase label.
_PHASE_WORDS = (("warm", "warmup"), ("steady", "steady"), ("load", "steady"), ("profile", "profiling"),
                ("collect", "collecting"), ("finish", "collecting"), ("analys", "analyzing"))


def _report_phase(live, name: str) -> None:
    phase = next((label for word, label in _PHASE_WORDS if word in name.lower()), "starting")
    try:
        live.update(phase=phase)
    except Exception:  # noqa: BLE001 - the live endpoint never stops a run
        pass


def _report_counts(live, completed_delta: int, running: int | None) -> None:
    try:
        live.update(completed_delta=completed_delta, running=running)
    except Exception:  # noqa: BLE001 - the live endpoint never stops a run
        pass


def _push_metrics(run_dir: Path, status: str, metrics: MetricsOptions, progress: Progress) -> dict[str, Any]:
    """Write metrics.prom and push it when a Pushgateway is configured; a failure only warns."""
    try:
        from harness.metrics.push import push_run

        result = push_run(run_dir, metrics.pushgateway, status=status, job=metrics.push_job,
                          delete_old_groups=metrics.delete_old_groups)
    except Exception as exc:  # noqa: BLE001 - results on disk matter more than the push
        progress.console.print(f"[yellow]warning[/yellow]: metrics not written or pushed: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}
    if result is None:
        return {"file": "metrics.prom", "pushed": False}
    if not result.ok:
        progress.console.print(f"[yellow]warning[/yellow]: {result.message} (the run's files are kept)")
    else:
        progress.note(f"metrics pushed to {result.url}")
    return {"file": "metrics.prom", "pushed": result.ok, "pushgateway": result.url, "message": result.message}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", required=True, help="scenario name under scenarios/ (demo) or a YAML path")
    parser.add_argument(
        "--runs-dir",
        default=None,
        help=f"where run directories go (default: ${RUNS_DIR_ENV}, else ./runs; inside a Ray job "
        "~/moe-harness/runs on the driver's node, since the job's working directory is temporary)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines; still prints the D4 table")
    from harness.sglang.version import add_version_argument

    add_version_argument(parser, "SGLang scenarios: the release the launch flags are spelled for, which must be "
                                 "the one installed on the nodes (default: the nodes are asked)")
    from harness.arg_types import port

    parser.add_argument("--metrics-port", type=port, default=None,
                        help="serve live progress metrics (phase, running batch, requests done) for Prometheus on this port while running (0: any free port)")
    from harness.metrics.cli_options import add_push_arguments

    add_push_arguments(parser)


def main_from_args(args: argparse.Namespace) -> int:
    try:
        scenario, path = load_scenario(args.scenario)
    except ScenarioError as exc:
        print("\n".join(f"moe-harness run: {line}" for line in exc.lines()), file=sys.stderr)
        return 2
    from harness.deployment_check import deployment_problems

    if problems := deployment_problems(scenario, args.sglang_version):  # the plan phase's refusals, now
        print("\n".join(f"moe-harness run: {line}" for line in ScenarioError(str(path), problems).lines()),
              file=sys.stderr)
        return 2
    root = Path(args.runs_dir).expanduser().resolve() if args.runs_dir else default_runs_root()
    try:
        check_destination_folder(root, "--runs-dir")
    except OutputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    metrics = MetricsOptions(pushgateway=args.pushgateway, push_job=args.push_job,
                             delete_old_groups=args.delete_old_groups, live_port=args.metrics_port)
    try:
        status, _ = run(scenario, path.resolve(), root, quiet=args.quiet, metrics=metrics,
                        sglang_version=args.sglang_version)
    except KeyboardInterrupt as exc:  # before the run's own handlers were installed: nothing was started
        print("interrupted before the run started", file=sys.stderr)
        return as_interrupted(exc).exit_status
    return status


def main(argv: list[str] | None = None) -> int:
    from harness.arg_types import OneLineParser

    parser = OneLineParser(prog="harness/run.py", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return main_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
