"""A run directory analysed again as its run analysed it: each engine's own analysis end over the
traces the run kept, with the options it recorded (manifest.json, scenario.yaml).

Why the engines' own functions: `moe-harness analyze RUN_DIR` must write what the run wrote into
RUN_DIR/analysis, and a third copy of the pipeline's tail would drift from the run's. SGLang: each
node's ranks through harness/node/node_analysis.py (analyze_node, calibrate_node: what the node
actors call), then harness/sglang/run_analysis.py's finish_analysis (what the engine calls);
embedded: harness/engines/embedded/analyse.py. Capture traces are the run's copies in
capture_traces/node<N>/, used exactly where the run used its node-local ones (it calibrated).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.table_files import WrittenAnalysis
from harness.recorded_run import RecordedRun, RunDirError

CAPTURE_TRACES = "capture_traces"
LOAD_RECORDS = "load/requests.jsonl"  # read by harness/sglang/run_analysis.py's finish_analysis


def reanalyse(run: RecordedRun, out_dir: Path, problems_at: str | None = None,
              jobs: int | None = None) -> WrittenAnalysis:
    """analysis/'s files for `run` into out_dir (which must exist); problems_at: as write_table_files.
    Raises AnalysisError (a bad trace set) or RunDirError (what the run recorded does not fit)."""
    from harness.manifest_check import first_mismatch

    engine = run.manifest.get("engine") or run.scenario.engine.kind
    if problem := first_mismatch(run.path, run.manifest, files_read(run, engine)):
        raise RunDirError(problem)  # each file read again is the one the run wrote
    if engine == "sglang":
        return _sglang(run, out_dir, problems_at, jobs)
    if engine == "embedded":
        from harness.engines.embedded.analyse import analyse

        device = (run.manifest.get("engine_info") or {}).get("device_name")
        return analyse([Path(p) for p in run.traces], run.scenario, run.run_name, out_dir, device_name=device,
                       problems_at=problems_at, jobs=jobs)
    raise RunDirError(f"{run.path / 'manifest.json'}: engine {engine!r} has no analysis to run again")


def files_read(run: RecordedRun, engine: str) -> list[Path]:
    """The run directory's files its analysis reads again: the traces; for SGLang also the capture
    traces where the run calibrated, its expert_load.json and its load records."""
    paths = [Path(p) for p in run.traces]
    if engine == "sglang":
        paths += [Path(p) for files in (_captures(run) or {}).values() for p in files]
        recorded = run.manifest.get("expert_load")
        if isinstance(recorded, dict) and isinstance(recorded.get("file"), str):
            paths.append(run.path / recorded["file"])
        paths.append(run.path / LOAD_RECORDS)
    return paths


def _captures(run: RecordedRun) -> dict[int, list[str]] | None:
    """Each node's capture traces where the run used them (it calibrated), else None."""
    from harness.node.node_analysis import own_capture_files

    if not isinstance(run.manifest.get("calibration"), list):
        return None
    kept = run.manifest.get("capture_traces") or []
    return {node: own_capture_files(kept, node, run.path / CAPTURE_TRACES / f"node{node}") for node in run.node_traces}


def _sglang(run: RecordedRun, out_dir: Path, problems_at: str | None, jobs: int | None) -> WrittenAnalysis:
    from analysis.api import AnalysisError
    from harness.node.node_analysis import analyse_nodes, analysis_options, analyze_node, calibrate_node
    from harness.sglang.run_analysis import finish_analysis

    options = analysis_options(run.scenario, run.run_name, jobs=jobs)
    captures = _captures(run)

    def calibrate_all(jobs_by_node: dict) -> list[dict]:
        return [calibrate_node(node, paths, opts) for node, (paths, opts) in jobs_by_node.items()]

    def analyze_all(jobs_by_node: dict) -> list[dict]:
        parts = []
        for node, (paths, opts) in jobs_by_node.items():
            try:
                parts.append(analyze_node(paths, opts))
            except AnalysisError as exc:
                raise AnalysisError(f"node {node}: analysis of {len(paths)} trace(s) failed: {exc}") from None
        return parts

    parts, calibrations = analyse_nodes(run.node_traces, options, captures, calibrate_all, analyze_all)
    return finish_analysis(parts, options, calibrations, _facts(run), out_dir, problems_at)


def _facts(run: RecordedRun):
    """RunFacts from what the run recorded: the values the engine read off the live run."""
    from harness.sglang.plan import PlanError
    from harness.sglang.run_analysis import RunFacts, load_window_start, shared_experts_apart
    from harness.sglang.spec import scenario_deployment

    m = run.manifest
    try:
        scheduler_batch = scenario_deployment(run.scenario).scheduler_batch
    except PlanError as exc:
        raise RunDirError(f"{run.path / 'scenario.yaml'}: {exc}") from None
    calibration = m.get("calibration")
    capture_note = calibration.get("not_calibrated", "") if isinstance(calibration, dict) else \
        "the run recorded no calibration"
    plan_nodes = (m.get("plan") or {}).get("nodes") or [{}]
    return RunFacts(scenario=run.scenario, run_name=run.run_name, run_dir=run.path,
                    accept_length=m.get("accept_length"), expert_load=m.get("expert_load") or {},
                    sglang_version=str(m.get("sglang_version") or (m.get("plan") or {}).get("sglang_version")),
                    shared_experts_apart=shared_experts_apart(plan_nodes[0].get("flag_keys") or {}),
                    scheduler_batch=scheduler_batch, capture_note=capture_note, load_window_s=load_window_start(m))


@contextmanager
def reanalysed(run_dir: str | Path) -> Iterator[tuple[RecordedRun, WrittenAnalysis, Path]]:
    """The run analysed again into a temporary analysis/ folder, removed on exit: for the commands that
    read a run's tables (report, compare, export) when its own analysis/ lacks what they read."""
    import tempfile

    from harness.recorded_run import read_run_dir

    run = read_run_dir(run_dir)
    with tempfile.TemporaryDirectory(prefix="moe-harness-reanalysis-") as tmp:
        out = Path(tmp) / "analysis"
        out.mkdir()
        yield run, reanalyse(run, out, problems_at="problems.csv"), out
