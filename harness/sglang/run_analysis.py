"""The end of an SGLang run's analysis: every node's rows combined into the D4 column, the run's notes
under the table, analysis/ written.

Why apart from the engine: `moe-harness analyze RUN_DIR` (harness/reanalysis.py) runs this same end
on the run directory's copies of the traces, so it writes what the run wrote. Nothing here needs
Ray: the engine gathers the nodes' rows through their actors, the command reads them locally
(harness/node/node_analysis.py: analyze_node, calibrate_node), and both hand them here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.table_files import WrittenAnalysis, write_table_files
from harness.node.node_analysis import calibration_report, combine
from harness.run_dir import write_atomic
from harness.scenario import Scenario
from harness.scenario_sol import sol_settings_for

FUSION_KEY = "--disable-shared-experts-fusion"  # the plan's flag, keyed by the scenario key that asked for it


@dataclass(frozen=True)
class RunFacts:
    """What the end reads off the run besides the nodes' rows; the engine fills it from the live run,
    the command from manifest.json and scenario.yaml (the same values: the run recorded them)."""

    scenario: Scenario
    run_name: str  # the run directory's name: the D4 column's name and the calibration note's folder
    run_dir: Path  # where the expert-load file is
    accept_length: float | None  # MTP accept length over the profiled window
    expert_load: dict  # the manifest's expert_load entry: {"file": ...} or {"error": ...}; {} when not asked
    sglang_version: str
    shared_experts_apart: bool  # the plan turned the shared-experts fusion off for the expert-load recorder
    scheduler_batch: tuple[int, int] | None  # the batch each scheduler's profiled steps must run at
    capture_note: str  # why the signature was not calibrated, said when there are no calibrations
    load_window_s: float | None = None  # the profile window's start on the load's clock (manifest profile.window_load_s)


def load_window_start(manifest: dict) -> float | None:
    """Where the profile window began on the load's clock, as the run recorded it (None: not recorded)."""
    window = (manifest.get("profile") or {}).get("window_load_s")
    return window[0] if window else None


def shared_experts_apart(node0_flag_keys: dict) -> bool:
    """Whether node 0's plan ({flag: the scenario key that asked for it}) ran the shared experts
    unfused because profile.expert_load asked (SGLang before 0.5.21)."""
    return node0_flag_keys.get(FUSION_KEY) == "profile.expert_load"


def finish_analysis(parts: list[dict], options: dict, calibrations: list[dict] | None, facts: RunFacts,
                    out_dir: Path, problems_at: str | None = None) -> WrittenAnalysis:
    """The nodes' rows (analyze_node per node, in node order) into analysis/ at out_dir.

    calibrations: calibrate_node per node, or None when the capture traces were not used (then
    facts.capture_note says why). Returns the table with the run's notes and the manifest entries
    `profiled_batch` and `calibration`."""
    sol, no_sol_reason = sol_settings_for(facts.scenario)  # SOL columns where the scenario says enough
    recorded = facts.expert_load or {}
    load = str(facts.run_dir / recorded["file"]) if "file" in recorded else None  # its expert_load.json
    records = facts.run_dir / "load" / "requests.jsonl"  # the profiled steps against the load (load_compare.py)
    result = combine(parts, options, accept_length=facts.accept_length, sol=sol, expert_load=load,
                     load_records=str(records) if records.is_file() else None, window_start_s=facts.load_window_s)
    manifest: dict = {}
    batch_note = _check_profiled_batch(result, facts.scheduler_batch, manifest)
    if calibrations is not None:
        note = _write_calibration(calibrations, options["signature"], out_dir, facts.run_name, manifest)
    else:
        note = f"\nNot calibrated: {facts.capture_note}.\n"
        manifest["calibration"] = {"not_calibrated": facts.capture_note}
    if "error" in recorded:
        note += f"\nNo expert load: {recorded['error']}.\n"
    if facts.shared_experts_apart:
        note += (f"\nExpert load recorded with the shared experts not fused into the routed experts' "
                 f"kernels ({FUSION_KEY}): SGLang {facts.sglang_version}'s recorder "
                 f"fails on a fused shared expert (fixed in 0.5.21), so this deployment runs them apart.\n")
    note += batch_note
    table, files = write_table_files(result, out_dir, no_sol_reason if sol is None else None, note, problems_at)
    if calibrations is not None:
        files["calibration.md"] = str(out_dir / "calibration.md")
    return WrittenAnalysis(result, table, files, manifest)


def _check_profiled_batch(result, scheduler_batch, manifest: dict) -> str:
    """Every profiled decode/verify step's bs against the scenario's batch per scheduler: the steps
    outside it become problems (problems.csv) and the line under the table names them."""
    check = result.check_profiled_batch(scheduler_batch)
    manifest["profiled_batch"] = check.summary()
    return f"\n{check.note()}\n"


def _write_calibration(calibrations: list[dict], used: str, out_dir: Path, run_name: str, manifest: dict) -> str:
    """calibration.md and .json beside the tables, the manifest's per-node summary; the line under the table."""
    md, entries, line = calibration_report(calibrations, used)
    write_atomic(out_dir / "calibration.md", md)
    write_atomic(out_dir / "calibration.json", json.dumps(entries, indent=2) + "\n")
    manifest["calibration"] = [{k: e[k] for k in ("node", "decode_trace")} | (
        {"error": e["error"]} if "error" in e else {"chosen": e["result"]["chosen"], "reason": e["result"]["reason"]})
        | {"used": e["used"]} for e in entries]
    return f"\nCalibration against the capture traces ({run_name}/analysis/calibration.md): {line}.\n"
