"""The embedded engine without Ray: `python -m harness.engines.embedded.standalone --scenario demo_gpu --out DIR`.

Why: a GPU box with torch and transformers but no Ray can still produce the same trace and D4
table as the Ray job (same engine class, same steady-state rule, same file names). Writes into
a new folder under DIR: scenario.yaml, engine.log, load/requests.jsonl, load/steps.jsonl,
traces/<name>-TP-0-DECODE.trace.json.gz, analysis/ (d4.md ...) and manifest.json (last).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from harness.engines.embedded.engine import DecodeEngine
from harness.run_dir import append_lines, create_run_dir, write_atomic, write_jsonl, write_manifest
from harness.scenario import EmbeddedEngine, ScenarioError, embedded_model_config, load_scenario, scenario_to_yaml
from harness.steady_state import NotSteadyError, is_steady
from harness.trace_names import trace_file_name


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
    log = run_dir / "engine.log"
    manifest: dict = {"status": "failed", "scenario": scenario.name, "runner": "standalone", "started_at": started}
    timings: dict[str, float] = {}
    w, p = scenario.workload, scenario.profile

    def timed(name: str, fn):
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            timings[name] = round(time.perf_counter() - t0, 3)
            append_lines(log, engine.log.drain() if engine is not None else [])
            print(f"  {name}: {timings[name]:.1f} s", file=sys.stderr)

    engine: DecodeEngine | None = None
    try:
        engine = timed("start engine", lambda: DecodeEngine(
            scenario.engine.model_dump(mode="json"), embedded_model_config(scenario), w.model_dump(mode="json")))
        manifest["engine_info"] = engine.describe()
        manifest["prefill_ms"] = timed("prefill", engine.prefill)
        warmup: list[float] = manifest.setdefault("warmup_step_ms", [])

        def warm() -> None:
            while len(warmup) < w.max_warmup_steps:
                warmup.extend(engine.decode(1))
                if is_steady(warmup, w.warmup_steps, w.steady_window, w.steady_rel_spread):
                    return
            raise NotSteadyError(warmup, w.steady_window, w.steady_rel_spread)

        timed("warm up to steady state", warm)
        prefix = scenario.outputs.trace_prefix or run_dir.name
        profiled = timed("profile", lambda: engine.profile(p.num_steps, prefix, p.record_shapes, p.with_stack))
        manifest["profiled_step_ms"] = profiled["step_ms"]
        name = trace_file_name(prefix)
        if name not in profiled["files"]:
            raise RuntimeError(f"the profile wrote no trace (expected {name})")
        trace = write_atomic(run_dir / "traces" / name, profiled["files"][name])
        finish_ms = timed("finish requests", engine.finish)
        write_jsonl(run_dir / "load" / "requests.jsonl", engine.request_records())
        steps = [("warmup", x) for x in warmup] + [("profile", x) for x in profiled["step_ms"]]
        steps += [("finish", x) for x in finish_ms]
        write_jsonl(run_dir / "load" / "steps.jsonl", [{"step": i, "phase": ph, "step_ms": x} for i, (ph, x) in enumerate(steps)])
        if analyse:
            from harness.engines.embedded.analyse import analyse as analyse_traces

            table, written = timed("analyse", lambda: analyse_traces([trace], scenario, run_dir.name, run_dir / "analysis"))
            manifest["analysis_outputs"] = written
            print(table)
        manifest["status"] = "ok"
        return 0
    except Exception as exc:  # noqa: BLE001 - the manifest must record any failure
        manifest["error"] = {"message": f"{type(exc).__name__}: {exc}"}
        print(f"run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        manifest["timings_s"] = timings
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
