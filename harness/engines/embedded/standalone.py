"""The embedded engine without Ray: `python -m harness.engines.embedded.standalone --scenario demo_gpu --out DIR`.

Why: a GPU box with torch and transformers but no Ray can still produce the same trace and D4
table as the Ray job (same engine class, same steady-state rule, same file names). Writes into
a new folder under DIR: scenario.yaml, engine.log, load/requests.jsonl, load/steps.jsonl,
traces/<name>-TP-0-DECODE.trace.json.gz, analysis/ (d4.md ...) and manifest.json (last).
Its stages are called by harness/stages.py, as the Ray job's are; StandaloneEngine says what differs.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from harness.engines.base import Engine, RunContext, Traces
from harness.engines.embedded.engine import DecodeEngine
from harness.run_dir import append_lines, create_run_dir, write_atomic, write_jsonl, write_manifest
from harness.scenario import EmbeddedEngine, ScenarioError, embedded_model_config, load_scenario, scenario_to_yaml
from harness.stages import run_stages
from harness.steady_state import NotSteadyError, is_steady
from harness.trace_names import trace_file_name


class StandaloneEngine(Engine):
    """The embedded engine in this process, its stages called by harness/stages.py as the Ray job's are.

    What differs from the Ray job's engine (ray_engine.py), kept as this runner has always written it:
    each stage's time goes to this manifest's `timings_s` and one stderr line ("  name: 1.2 s"), not to
    progress phases; the engine's log lines are appended to engine.log after each timed step; the
    trace stays in traces/ (nothing discarded: the trace is what a GPU box run is for); with
    analyse=False the analyse stage does nothing and returns None; a failure's error has no phase."""

    def __init__(self, ctx: RunContext, analyse: bool = True):
        super().__init__(ctx)
        self.analyse_traces = analyse
        self.log_path = self.run_dir / "engine.log"
        self.timings: dict[str, float] = {}
        self.engine: DecodeEngine | None = None
        self.warmup: list[float] = []
        self.profiled_step_ms: list[float] = []

    def timed(self, name: str, fn):
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.timings[name] = round(time.perf_counter() - t0, 3)
            append_lines(self.log_path, self.engine.log.drain() if self.engine is not None else [])
            print(f"  {name}: {self.timings[name]:.1f} s", file=sys.stderr)

    def start(self) -> None:
        s, w = self.scenario, self.scenario.workload
        self.engine = self.timed("start engine", lambda: DecodeEngine(
            s.engine.model_dump(mode="json"), embedded_model_config(s), w.model_dump(mode="json")))
        self.manifest["engine_info"] = self.engine.describe()

    def reach_steady_state(self) -> None:
        engine, w = self.engine, self.scenario.workload
        self.manifest["prefill_ms"] = self.timed("prefill", engine.prefill)
        warmup: list[float] = self.manifest.setdefault("warmup_step_ms", [])
        self.warmup = warmup

        def warm() -> None:
            while len(warmup) < w.max_warmup_steps:
                warmup.extend(engine.decode(1))
                if is_steady(warmup, w.warmup_steps, w.steady_window, w.steady_rel_spread):
                    return
            raise NotSteadyError(warmup, w.steady_window, w.steady_rel_spread)

        self.timed("warm up to steady state", warm)

    def profile(self) -> Traces:
        engine, p = self.engine, self.scenario.profile
        prefix = self.scenario.outputs.trace_prefix or self.run_dir.name
        profiled = self.timed("profile", lambda: engine.profile(p.num_steps, prefix, p.record_shapes, p.with_stack))
        self.manifest["profiled_step_ms"] = profiled["step_ms"]
        self.profiled_step_ms = profiled["step_ms"]
        name = trace_file_name(prefix)
        if name not in profiled["files"]:
            raise RuntimeError(f"the profile wrote no trace (expected {name})")
        return Traces(in_run_dir=[write_atomic(self.run_dir / "traces" / name, profiled["files"][name])])

    def finish(self) -> None:
        engine = self.engine
        finish_ms = self.timed("finish requests", engine.finish)
        write_jsonl(self.run_dir / "load" / "requests.jsonl", engine.request_records())
        steps = [("warmup", x) for x in self.warmup] + [("profile", x) for x in self.profiled_step_ms]
        steps += [("finish", x) for x in finish_ms]
        write_jsonl(self.run_dir / "load" / "steps.jsonl",
                    [{"step": i, "phase": ph, "step_ms": x} for i, (ph, x) in enumerate(steps)])

    def collect(self, traces: Traces) -> Traces:
        """Nothing to copy: profile() wrote the trace into the run directory."""
        return traces

    def analyse(self, traces: Traces) -> str | None:
        if not self.analyse_traces:
            return None
        from harness.engines.embedded.analyse import analyse as analyse_traces

        done = self.timed("analyse", lambda: analyse_traces(traces.in_run_dir, self.scenario,
                                                            self.run_dir.name, self.run_dir / "analysis"))
        self.manifest["analysis_outputs"] = done.files
        return done.table

    def discard_traces(self, traces: Traces) -> None:
        """The trace stays: it is this runner's output."""

    def stop(self) -> None:
        """Nothing runs apart: the engine lives in this process."""


def run(scenario_name: str, out_root: Path, analyse: bool = True) -> int:
    try:
        scenario, path = load_scenario(scenario_name)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not isinstance(scenario.engine, EmbeddedEngine):
        print(f"error: scenario {path} is not an embedded-engine scenario", file=sys.stderr)
        return 2
    started = time.time()
    run_dir = create_run_dir(out_root, scenario.name, started)
    print(f"run directory: {run_dir}", file=sys.stderr)
    write_atomic(run_dir / "scenario.yaml", scenario_to_yaml(scenario))
    manifest: dict = {"status": "failed", "scenario": scenario.name, "runner": "standalone", "started_at": started}
    engine = StandaloneEngine(RunContext(scenario, run_dir, manifest, progress=None), analyse=analyse)
    try:
        table = run_stages(engine)
        if table is not None:
            print(table)
        manifest["status"] = "ok"
        return 0
    except Exception as exc:  # noqa: BLE001 - the manifest must record any failure
        manifest["error"] = {"message": f"{type(exc).__name__}: {exc}"}
        print(f"run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        manifest["timings_s"] = engine.timings
        manifest["wall_s"] = round(time.time() - started, 3)
        write_manifest(run_dir, manifest)
        print(f"manifest: {run_dir / 'manifest.json'} (status {manifest['status']})", file=sys.stderr)
        print(json.dumps({"run_dir": str(run_dir), "status": manifest["status"]}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.engines.embedded.standalone", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--scenario", required=True, help="scenario name (demo_gpu) or YAML path")
    parser.add_argument("--out", required=True, type=Path, help="folder that receives the new run directory")
    parser.add_argument("--no-analysis", action="store_true", help="only produce the trace and load records")
    args = parser.parse_args(argv)
    return run(args.scenario, args.out.resolve(), analyse=not args.no_analysis)


if __name__ == "__main__":
    sys.exit(main())
