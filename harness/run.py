"""The main job: `python harness/run.py --scenario demo` (also `moe-harness run`, or a Ray job).

Launch the engine through Ray (the embedded engine in one actor, or SGLang on every node through
harness/sglang/job.py), drive the batch to a steady state, profile a bounded number of decode steps
on every rank, collect into a new run directory, analyse, print the D4 table.
Every phase's output is written as soon as it exists; manifest.json, written last, says whether
the run finished (status ok) or where it stopped (status failed) and why.
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

from harness.run_dir import (
    RUNS_DIR_ENV,
    append_lines,
    create_run_dir,
    default_runs_root,
    in_ray_job,
    write_atomic,
    write_jsonl,
    write_manifest,
)
from harness.progress import Progress
from harness.run_errors import RunFailed
from harness.scenario import (
    REPO_ROOT,
    EmbeddedEngine,
    Scenario,
    ScenarioError,
    embedded_model_config,
    load_scenario,
    scenario_to_yaml,
)
from harness.steady_state import NotSteadyError, is_steady
from harness.trace_names import trace_file_name

# Kept out of the code Ray uploads for actors when the driver is not already a Ray job.
RUNTIME_ENV_EXCLUDES = [".git", ".venv", "runs", "**/__pycache__", ".pytest_cache", "*.egg-info", "build", "dist"]


def connect_ray(repo_root: Path, progress: Progress) -> Any:
    """An existing cluster (inside a Ray job, or RAY_ADDRESS set), else a local Ray started here."""
    import ray

    if ray.is_initialized():  # run() called from a program (or test) already connected to a cluster
        progress.note("using this process's Ray connection")
    elif in_ray_job():
        ray.init(log_to_driver=False)  # the job's runtime env (working_dir) already carries the code
        progress.note(f"inside a Ray job; cluster at {os.environ.get('RAY_ADDRESS', 'auto')}")
    elif os.environ.get("RAY_ADDRESS"):
        ray.init(
            log_to_driver=False,
            runtime_env={"working_dir": str(repo_root), "excludes": RUNTIME_ENV_EXCLUDES},
        )
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


class EngineHandle:
    """Calls the engine actor with a time bound, writing its log lines to the run directory at once."""

    def __init__(self, ray: Any, actor: Any, log_path: Path):
        self.ray, self.actor, self.log_path = ray, actor, log_path

    def call(self, method: str, *args: Any, timeout_s: float) -> Any:
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            reply = self.ray.get(getattr(self.actor, method).remote(*args), timeout=timeout_s)
        except GetTimeoutError as exc:
            raise RunFailed(f"engine call {method} did not return within {timeout_s:.0f} s") from exc
        except RayActorError as exc:
            raise RunFailed(
                f"the engine actor died during {method}: {_first_line(exc)}. "
                f"Its log so far is in {self.log_path}"
            ) from exc
        append_lines(self.log_path, reply["log"])
        return reply["result"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        if "exit" in line.lower() or "died" in line.lower() or "Error" in line:
            return line.strip()[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


def start_engine(ray: Any, scenario: Scenario, log_path: Path) -> EngineHandle:
    from harness.engines.embedded.actor import remote_actor_class

    engine = scenario.engine
    assert isinstance(engine, EmbeddedEngine)
    options: dict[str, Any] = {"num_cpus": engine.threads or 1}
    if engine.device == "cuda":
        options["num_gpus"] = 1
    actor = remote_actor_class().options(**options).remote(
        engine.model_dump(mode="json"), embedded_model_config(scenario), scenario.workload.model_dump(mode="json")
    )
    return EngineHandle(ray, actor, log_path)


def drive_to_steady_state(handle: EngineHandle, scenario: Scenario, progress: Progress, step_ms: list[float]) -> None:
    """Decode one step at a time (appending to `step_ms`, so a failure keeps them) until steady."""
    w = scenario.workload
    while len(step_ms) < w.max_warmup_steps:
        step_ms += handle.call("decode", 1, timeout_s=scenario.profile.timeout_s)
        if is_steady(step_ms, w.warmup_steps, w.steady_window, w.steady_rel_spread):
            window = step_ms[-w.steady_window :]
            progress.note(f"steady after {len(step_ms)} steps: {sum(window) / len(window):.2f} ms per step")
            return
    raise NotSteadyError(step_ms, w.steady_window, w.steady_rel_spread)


def analyse(trace_paths: list[Path], scenario: Scenario, run_name: str, out_dir: Path,
            device_name: str | None = None) -> tuple[str, dict[str, str]]:
    """analysis.api on the collected traces; returns the D4 table (markdown, as written) and the files.

    device_name: the GPU the engine reported; when it names another built-in peaks file than the
    scenario's cluster.gpu_type (demo_gpu declared H100, run on an H200), SOL uses the GPU it ran on.
    """
    import msgspec

    from analysis.api import AnalysisOptions, analyze, write_outputs

    from harness.scenario_sol import hardware_for_device, sol_settings_for

    a = scenario.analysis
    sol, no_sol_reason = sol_settings_for(scenario)  # SOL columns where the scenario says enough
    ran_on = hardware_for_device(device_name)
    sol_note = ""
    if sol is not None and ran_on and ran_on != sol.hardware:
        sol_note = f"\nSOL peaks: {ran_on} (the engine ran on {device_name}; the scenario says {sol.hardware}).\n"
        sol = msgspec.structs.replace(sol, hardware=ran_on)
    result = analyze(
        [str(p) for p in trace_paths],
        signature=a.signature,
        model=a.model,
        options=AnalysisOptions(run=run_name, rank_policy=a.rank_policy, sol=sol),
    )
    files = write_outputs(result, out_dir)
    table = Path(files["d4.md"]).read_text(encoding="utf-8")
    if sol is None:
        table += f"\nNo SOL columns: {no_sol_reason}.\n"
    table += sol_note
    if result.problems:
        table += f"\n{len(result.problems)} problem(s) reported by the analysis: see {files['problems.csv']}\n"
    return table, {name: str(path) for name, path in files.items()}


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

    sglang_version: the SGLang release an sglang scenario is planned for (None: versions.yaml's default)."""
    metrics = metrics or MetricsOptions()
    progress = Progress(quiet=quiet)
    started_at = time.time()
    run_dir = create_run_dir(runs_root, scenario.name, started_at)
    progress.console.print(f"run directory: {run_dir}")
    live = _start_live_exporter(scenario, run_dir, metrics, progress)
    write_atomic(run_dir / "scenario.yaml", scenario_to_yaml(scenario))
    write_atomic(run_dir / "scenario.source.yaml", scenario_path.read_bytes())
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
    try:
        from harness.sglang.server_actor import DeploymentError
    except ImportError:  # no Ray installed: connect_ray below says so
        DeploymentError = RunFailed  # noqa: N806
    try:
        with progress.phase("connect to Ray"):
            ray = connect_ray(REPO_ROOT, progress)
            manifest["ray_nodes"] = len([n for n in ray.nodes() if n.get("Alive")])
        if isinstance(scenario.engine, EmbeddedEngine):
            table = run_embedded(ray, scenario, run_dir, manifest, progress)
        else:
            from harness.sglang.job import run_sglang

            table = run_sglang(scenario, run_dir, manifest, progress, sglang_version=sglang_version)
        write_atomic(run_dir / "table.md", table)  # the D4 table with the run's notes under it, as printed
        manifest["status"] = "ok"
        exit_status = 0
        print(table, flush=True)
    except (RunFailed, NotSteadyError, DeploymentError) as exc:
        manifest["error"] = {"phase": progress.current, "message": str(exc)}
        progress.console.print(f"[red]run failed[/red] during {progress.current}: {exc}")
    except Exception as exc:  # noqa: BLE001 - any failure must still leave a manifest behind
        manifest["error"] = {"phase": progress.current, "message": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc()}
        progress.console.print(f"[red]run failed[/red] during {progress.current}: {type(exc).__name__}: {exc}")
    finally:
        manifest["versions"] = _versions(manifest.get("engine_info"))
        manifest["timings_s"] = progress.timings_s
        manifest["finished_at"] = time.time()
        manifest["wall_s"] = round(manifest["finished_at"] - started_at, 3)
        if live is not None:
            live.update(phase="done" if manifest["status"] == "ok" else "failed")
            live.stop()
        manifest["metrics"] = _push_metrics(run_dir, manifest["status"], metrics, progress)
        write_manifest(run_dir, manifest)
        progress.console.print(f"manifest: {run_dir / 'manifest.json'} (status {manifest['status']})")
    return exit_status, run_dir


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
        progress.note(f"metrics pushed to {metrics.pushgateway}")
    return {"file": "metrics.prom", "pushed": result.ok, "pushgateway": metrics.pushgateway, "message": result.message}


def run_embedded(ray: Any, scenario: Scenario, run_dir: Path, manifest: dict[str, Any], progress: Progress) -> str:
    """The embedded engine's phases; returns the D4 table. The engine actor is stopped on every exit."""
    log_path = run_dir / "engine.log"
    handle: EngineHandle | None = None
    try:
        with progress.phase("start engine"):
            handle = start_engine(ray, scenario, log_path)
            engine_info = handle.call("ready", timeout_s=scenario.engine.start_timeout_s)
            manifest["engine_info"] = engine_info
            progress.note(
                f"{engine_info['num_layers']} layers, {engine_info['parameters'] / 1e6:.1f} M parameters on "
                f"{engine_info['device_name']} (host {engine_info['hostname']})"
            )
        with progress.phase("prefill"):
            manifest["prefill_ms"] = handle.call("prefill", timeout_s=scenario.profile.timeout_s)
        progress.counts(running=scenario.workload.batch_size)  # the engine decodes the whole batch each step
        with progress.phase("warm up to steady state"):
            warmup_ms: list[float] = manifest.setdefault("warmup_step_ms", [])
            drive_to_steady_state(handle, scenario, progress, warmup_ms)
        prefix = scenario.outputs.trace_prefix or run_dir.name
        with progress.phase(f"profile {scenario.profile.num_steps} decode steps"):
            profiled = handle.call(
                "profile", scenario.profile.num_steps, prefix, scenario.profile.record_shapes,
                scenario.profile.with_stack, timeout_s=scenario.profile.timeout_s,
            )
            manifest["profiled_step_ms"] = profiled["step_ms"]
            expected = trace_file_name(prefix, "DECODE", 0)
            if expected not in profiled["files"]:
                raise RunFailed(
                    f"the profile wrote no trace: expected {expected} from rank TP-0, got "
                    f"{sorted(profiled['files']) or 'nothing'} (see {log_path})"
                )
            trace_paths = [write_atomic(run_dir / "traces" / name, data) for name, data in sorted(profiled["files"].items())]
        with progress.phase("finish requests"):
            finished = handle.call("finish", timeout_s=scenario.profile.timeout_s)
            write_jsonl(run_dir / "load" / "requests.jsonl", finished["requests"])
            steps = [{"phase": "warmup", "step_ms": x} for x in warmup_ms]
            steps += [{"phase": "profile", "step_ms": x} for x in profiled["step_ms"]]
            steps += [{"phase": "finish", "step_ms": x} for x in finished["step_ms"]]
            write_jsonl(run_dir / "load" / "steps.jsonl", [dict(s, step=i) for i, s in enumerate(steps)])
            progress.counts(completed_delta=sum(1 for r in finished["requests"] if r["completed"]), running=0)
            incomplete = [r["request_id"] for r in finished["requests"] if not r["completed"]]
            if incomplete:
                raise RunFailed(f"requests {incomplete} did not complete")
        _stop(ray, handle)
        handle = None
        with progress.phase("analyse traces"):
            table, written = analyse(trace_paths, scenario, run_dir.name, run_dir / "analysis",
                                     device_name=(manifest.get("engine_info") or {}).get("device_name"))
            manifest["analysis_outputs"] = written
        if not scenario.outputs.keep_traces:
            for path in trace_paths:
                path.unlink()
            manifest["traces_removed"] = [p.name for p in trace_paths]
        return table
    finally:
        if handle is not None:
            _stop(ray, handle)


def _stop(ray: Any, handle: EngineHandle) -> None:
    try:
        ray.kill(handle.actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already dead is fine
        pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", required=True, help="scenario name under scenarios/ (demo) or a YAML path")
    parser.add_argument(
        "--runs-dir",
        default=None,
        help=f"where run directories go (default: ${RUNS_DIR_ENV}, else ./runs; inside a Ray job "
        "~/moe-harness/runs on the driver's node, since the job's working directory is temporary)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines; still prints the D4 table")
    from harness.sglang.version import load_table, supported_versions

    parser.add_argument("--sglang-version", default=None, choices=supported_versions(),
                        help=f"SGLang scenarios: the release installed on the nodes, which the launch flags are "
                        f"spelled for (default {load_table()['default']}; harness/sglang/versions.yaml)")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve live progress metrics (phase, running batch, requests done) for Prometheus on this port while running (0: any free port)")
    from harness.metrics.cli_options import add_push_arguments

    add_push_arguments(parser)


def main_from_args(args: argparse.Namespace) -> int:
    try:
        scenario, path = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = Path(args.runs_dir).expanduser().resolve() if args.runs_dir else default_runs_root()
    metrics = MetricsOptions(pushgateway=args.pushgateway, push_job=args.push_job,
                             delete_old_groups=args.delete_old_groups, live_port=args.metrics_port)
    status, _ = run(scenario, path.resolve(), root, quiet=args.quiet, metrics=metrics,
                    sglang_version=args.sglang_version)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness/run.py", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return main_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
