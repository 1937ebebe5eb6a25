"""The SGLang part of the main job: plan, place, start, steady load, profile every rank, analyse.

Paths: each node writes its server log and its ranks' traces under a node-local folder
(`$MOE_HARNESS_NODE_DIR/<run>`, default `<tmp>/moe-harness/<run>`; the same path on every node, as
/start_profile sends one output_dir to all ranks). Nodes share no file system, so logs and, with
`outputs.keep_traces`, traces come back to the run directory through Ray. Each node analyses its
own ranks; the driver combines their rows into the D4 column (harness/sglang/node_analysis.py).
Node-local traces are removed once copied and analysed; after a failure they stay (the manifest's
`node_dir` says where).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
import tempfile
import time
from pathlib import Path
from typing import Any

import ray

from harness.load.background import BackgroundLoad
from harness.load.summary import summarize
from harness.run_dir import write_atomic
from harness.run_errors import RunFailed
from harness.scenario_sol import sol_settings_for
from harness.sglang.node_analysis import (analysis_options, calibration_report, combine,
                                          signature_after_calibration)
from harness.sglang.plan import build_plan, node_ranges
from harness.sglang.profile import profile_decode
from harness.sglang.server_actor import Deployment, DeploymentError, launch
from harness.sglang.spec import deployment_spec

NODE_DIR_ENV = "MOE_HARNESS_NODE_DIR"
POLL_S = 0.5


def node_dir_for(run_name: str) -> str:
    root = os.environ.get(NODE_DIR_ENV) or os.path.join(tempfile.gettempdir(), "moe-harness")
    return str(Path(root) / run_name)


def _unwrap(exc: BaseException) -> BaseException:
    """A DeploymentError raised inside an actor arrives wrapped in RayTaskError; show its own text."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def wait_for_running_batch(dep: Deployment, load: BackgroundLoad, target: int, timeout_s: float, progress) -> float:
    """Until the server (/v1/loads: every DP rank, every node) reports `target` running requests; a dead
    node or failed request ends it at once."""
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        dep.check_alive()
        failure = load.first_failure()
        if failure:
            dep.check_alive()  # a dead node explains a failed request best
            raise RunFailed(f"the load failed before reaching the running batch: {failure}")
        seen = load.running_batch()
        if seen is not None:
            progress.counts(running=int(seen))
        if seen is not None and seen >= target:
            progress.note(f"server reports {seen:.0f} running requests (target {target})")
            return seen
        time.sleep(POLL_S)
    raise RunFailed(f"the server reported {seen if seen is not None else 'no'} running requests, never the target "
                    f"{target} (workload.batch_size), within {timeout_s:.0f} s (profile.timeout_s); check "
                    "engine.max_running_requests and the server logs in logs/")


def copy_capture_traces(dep: Deployment, trace_dir: str, run_dir: Path) -> list[str]:
    """The capture traces each node's servers wrote while starting, into capture_traces/node<N>/."""
    capture = dep.plan.sglang.capture_trace
    folder = f"{trace_dir}/{capture.subdir}"
    kept = []
    for rank, actor in enumerate(dep.actors):
        _, tp_ranks = node_ranges(dep.plan.spec, rank)  # this node's own files (a shared disk holds all)
        paths = sorted({p for tp in tp_ranks
                        for p in ray.get(actor.list_files.remote(folder, capture.pattern.format(tp=tp)), timeout=60)})
        if not paths:
            raise RunFailed(f"profile.capture_traces: node {rank} wrote no CUDA-graph capture trace "
                            f"({capture.pattern}) in {folder}; see logs/sglang-node{rank}.log")
        for p in paths:
            data = ray.get(actor.read_file.remote(p), timeout=300)
            kept.append(str(write_atomic(run_dir / "capture_traces" / f"node{rank}" / Path(p).name, data)
                            .relative_to(run_dir)))
    return kept


def capture_use(plan, spec, trace_dir: str) -> tuple[str | None, str]:
    """(the node-local capture folder the analysis reads, or None; why not, when None).

    Capture traces recorded without Python stacks (SGLang 0.5.17) hold no nn.Module ranges, so they
    cannot name kernels; they are still copied to the run directory, and the table says so."""
    capture = plan.sglang.capture_trace
    if not spec.capture_traces:
        return None, ("profile.capture_traces is off, so the signature was not checked against the "
                      "CUDA-graph capture traces; turn it on, or run `moe-harness calibrate --truth EAGER_TRACE`")
    if not capture.with_stack:
        return None, (f"SGLang {plan.sglang.version} records its capture traces without Python stacks "
                      "(no module ranges to name kernels with): they are kept in capture_traces/ but not used; "
                      "run `moe-harness calibrate --truth EAGER_TRACE` with an eager pass recorded with stacks")
    return f"{trace_dir}/{capture.subdir}", ""


def run_sglang(scenario, run_dir: Path, manifest: dict[str, Any], progress, sglang_version: str | None = None) -> str:
    """Runs every phase; returns the D4 table (markdown). Raises RunFailed / DeploymentError on failure.

    sglang_version: the release the plan is spelled for (versions.yaml; None: the default)."""
    engine, w, prof = scenario.engine, scenario.workload, scenario.profile
    node_dir = node_dir_for(run_dir.name)
    trace_dir = f"{node_dir}/traces"
    manifest["node_dir"] = node_dir
    with progress.phase("plan"):
        spec = deployment_spec(engine.model_dump(mode="json"), scenario.cluster.model_dump(mode="json"),
                               profile=prof.model_dump(mode="json"))
        plan = build_plan(spec, profile_dir=trace_dir, version=sglang_version)
        manifest["sglang_version"] = plan.sglang.version
        manifest["plan"] = plan.to_manifest()  # secrets masked
        write_atomic(run_dir / "plan.sh", plan.render())
    dep: Deployment | None = None
    load: BackgroundLoad | None = None
    try:
        with progress.phase(f"start SGLang on {spec.nodes} node(s)"):
            try:
                dep = launch(plan, f"{node_dir}/logs", ready_timeout_s=engine.ready_timeout_s,
                             logs_to=run_dir / "logs")
            except DeploymentError as exc:
                raise RunFailed(str(exc)) from None
            manifest["node_check"] = {str(r): c for r, c in (dep.node_checks or {}).items()}
            manifest["nodes"] = ray.get([a.where.remote() for a in dep.actors], timeout=60)
            manifest["server_url"] = dep.url
            progress.note(f"node 0 at {dep.url}; " + ", ".join(f"node {n['node_rank']} on {n['ip']}"
                                                               for n in manifest["nodes"]))
        if spec.capture_traces:
            with progress.phase("copy CUDA-graph capture traces"):
                manifest["capture_traces"] = copy_capture_traces(dep, trace_dir, run_dir)
        with progress.phase(f"load to a running batch of {w.batch_size}"):
            load = BackgroundLoad(dep.url, w.batch_size, w.input_len, w.output_len,
                                  str(run_dir / "load" / "requests.jsonl"), ramp_s=min(10.0, 0.01 * w.batch_size),
                                  loads_path=plan.sglang.endpoints["loads"])
            manifest["running_batch"] = wait_for_running_batch(dep, load, w.batch_size, prof.timeout_s, progress)
        prefix = scenario.outputs.trace_prefix or run_dir.name
        with progress.phase(f"profile {prof.num_steps} decode steps on every rank"):
            progress.note(f"new requests paused; SGLang profiler {plan.profiler}")
            try:
                outcome = profile_decode(dep, load, trace_dir, prefix, prof.num_steps, prof.timeout_s,
                                         with_stack=prof.with_stack, record_shapes=prof.record_shapes)
            except DeploymentError as exc:
                dep.check_alive()
                raise RunFailed(str(_unwrap(exc))) from None
            traces = outcome.traces
            manifest["profile"] = {"profiler": plan.profiler, "window_s": outcome.window_s,
                                   "running_at_start": outcome.running_at_start,
                                   "running_at_end": outcome.running_at_end, "stop_profile": outcome.stop_profile}
            manifest["node_traces"] = {str(r): [Path(p).name for p in ps] for r, ps in traces.items()}
            manifest["accept_length"] = outcome.accept_length if spec.speculative else None
            if spec.speculative:
                progress.note(f"MTP accept length over the profiled window: "
                              f"{outcome.accept_length if outcome.accept_length is not None else 'not reported'}")
        with progress.phase("finish requests"):
            finished = load.stop_and_wait(prof.timeout_s)
            records = [asdict(r) for r in load.records]
            summary = summarize(records, num_gpus=spec.world_size, accept_length=manifest["accept_length"])
            write_atomic(run_dir / "load" / "summary.json", json.dumps(summary, indent=2) + "\n")
            dep.check_alive()
            if not finished:
                raise RunFailed(f"requests still running {prof.timeout_s:.0f} s after the load stopped")
            failure = load.first_failure()
            if failure:
                raise RunFailed(f"{summary['failed']} of {summary['requests']} requests failed; first: {failure}")
            progress.counts(completed_delta=summary["completed"], running=0)
            progress.note(f"{summary['completed']} requests, "
                          f"{summary.get('output_tok_per_s_per_gpu') or 0:.1f} output tokens/s per GPU")
        with progress.phase("stop servers"):
            ray.get([a.stop.remote() for a in dep.actors], timeout=60)
            dep.fetch_logs(run_dir / "logs")
        if scenario.outputs.keep_traces:
            with progress.phase("copy traces to the run directory"):
                kept = []
                for rank, paths in sorted(traces.items()):
                    for p in paths:
                        data = ray.get(dep.actors[rank].read_file.remote(p), timeout=prof.timeout_s)
                        kept.append(write_atomic(run_dir / "traces" / Path(p).name, data).name)
                manifest["traces"] = kept
        with progress.phase("analyse each node's ranks"):
            capture_dir, capture_note = capture_use(dep.plan, spec, trace_dir)
            options = analysis_options(scenario, run_dir.name, capture_dir=capture_dir)
            calibrations = None
            if capture_dir:
                progress.note(f"calibrating {options['signature']} against each node's capture traces")
                calibrations = ray.get([dep.actors[rank].calibrate_signature.remote(paths, options)
                                        for rank, paths in sorted(traces.items())], timeout=prof.timeout_s)
                options["signature"] = signature_after_calibration(options["signature"], calibrations)
            refs = [dep.actors[rank].analyze_traces.remote(paths, options) for rank, paths in sorted(traces.items())]
            try:
                parts = ray.get(refs, timeout=prof.timeout_s)
            except DeploymentError as exc:
                raise RunFailed(str(_unwrap(exc))) from None
            sol, no_sol_reason = sol_settings_for(scenario)  # SOL columns where the scenario says enough
            result = combine(parts, options, accept_length=manifest["accept_length"], sol=sol)
            from analysis.api import write_outputs
            files = write_outputs(result, run_dir / "analysis")
            manifest["analysis_outputs"] = {k: str(v) for k, v in files.items()}
            table = Path(files["d4.md"]).read_text(encoding="utf-8")
            if sol is None:
                table += f"\nNo SOL columns: {no_sol_reason}.\n"
            if calibrations is not None:
                md, entries, line = calibration_report(calibrations, options["signature"])
                write_atomic(run_dir / "analysis" / "calibration.md", md)
                write_atomic(run_dir / "analysis" / "calibration.json", json.dumps(entries, indent=2) + "\n")
                manifest["analysis_outputs"]["calibration.md"] = str(run_dir / "analysis" / "calibration.md")
                manifest["calibration"] = [{k: e[k] for k in ("node", "decode_trace")} | (
                    {"error": e["error"]} if "error" in e else {"chosen": e["result"]["chosen"], "reason": e["result"]["reason"]})
                    | {"used": e["used"]} for e in entries]
                table += f"\nCalibration against the capture traces ({run_dir.name}/analysis/calibration.md): {line}.\n"
            else:
                table += f"\nNot calibrated: {capture_note}.\n"
                manifest["calibration"] = {"not_calibrated": capture_note}
            if result.problems:
                table += f"\n{len(result.problems)} problem(s) reported by the analysis: see {files['problems.csv']}\n"
        ray.get([dep.actors[rank].remove_files.remote(paths) for rank, paths in traces.items()], timeout=60)
        manifest["node_traces_removed"] = True
        return table
    finally:
        if load is not None:
            load.stop()
        if dep is not None:
            try:
                ray.get([a.stop.remote() for a in dep.actors], timeout=60)  # servers first: logs are then complete
                dep.fetch_logs(run_dir / "logs")
            finally:
                dep.stop()
        if load is not None:
            load.thread.join(timeout=30)
